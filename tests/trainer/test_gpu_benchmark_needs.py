"""`benchmarks/gpu_trainer.py` runs from a checkout where only torch, transformers, accelerate and
safetensors are installed (what the GPU machines users and this project measure on have).

A GPU cannot be reached here, so the script runs its CPU smoke shape; what is checked is the import
closure: a virtual environment is built holding only those four distributions and what they require
(linked from the project's environment, so nothing is downloaded), and the script runs in it."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter importing torch and transformers (≈ 10–20 s)

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("torch", "transformers", "accelerate", "safetensors")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(names: tuple[str, ...]) -> set[str]:
    """The distributions `names` require, transitively (extras left out)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in reqs if "extra ==" not in r]
    return seen


def _venv_with_only(names: tuple[str, ...], dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    site = next(dest.glob("lib/python*/site-packages"))
    keep, linked = _closure(names), set()
    for dist in md.distributions():
        if _norm(dist.metadata["Name"]) not in keep:
            continue
        for f in dist.files or []:
            top = str(f).split("/")[0]
            src = Path(str(dist.locate_file(top)))
            if top not in linked and not top.startswith("..") and top != "__pycache__" and src.exists():
                (site / top).symlink_to(src)
                linked.add(top)
    return dest / "bin" / "python"


def test_the_gpu_benchmark_needs_only_torch_transformers_accelerate_safetensors(tmp_path: Path) -> None:
    python = _venv_with_only(ALLOWED, tmp_path / "venv")
    for absent in ("tenacity", "pydantic_settings"):  # the project's own needs are really not there
        probe = subprocess.run([python, "-c", f"import {absent}"], capture_output=True, check=False)
        assert probe.returncode != 0
    r = subprocess.run(
        [python, str(ROOT / "benchmarks" / "gpu_trainer.py"), "--shape", "tiny", "--lengths", "128"],
        cwd=tmp_path,  # not the checkout: the script finds the project's packages itself
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    row = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("{")))
    assert row["tokens"] == 128
    assert row["train_tok_s"] > 0
    assert row["stored_mib"] > 0
