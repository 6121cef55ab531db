"""`benchmarks/gpu_trainer.py` runs from a checkout on the GPU machines' image plus the wheels pinned in
benchmarks/gpu_requirements.txt, and measures the trainer's own code path.

A GPU cannot be reached here, so the script runs its CPU smoke shape, in bf16 mixed precision and in
float32, in a virtual environment holding only the image's distributions (and what they require) and
the pinned wheels (linked from the project's environment, so nothing is downloaded): an import of
anything else fails the test. The figures it prints are checked, not just its exit status."""

from __future__ import annotations

import importlib.metadata as md
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # two fresh interpreters importing torch and transformers, a few steps each

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "benchmarks" / "gpu_requirements.txt"
# What the GPU machines' image holds (as the device machines' notes list it).
# fmt: off
GPU_IMAGE = [
    "absl-py", "accelerate", "aiofiles", "aiohttp", "anyio", "attrs", "certifi", "click", "cloudpickle",
    "filelock", "fsspec", "h11", "hf-xet", "httpcore", "httpx", "huggingface-hub", "idna", "jinja2",
    "markdown-it-py", "markupsafe", "matplotlib", "mdurl", "networkx", "numpy", "packaging", "pandas",
    "pillow", "pip", "pluggy", "protobuf", "psutil", "pyarrow", "pygments", "pyparsing", "python-dateutil",
    "pytest", "pyyaml", "regex", "requests", "rich", "safetensors", "setuptools", "shellingham", "six",
    "sympy", "tabulate", "tensorboard", "tokenizers", "torch", "tqdm", "transformers", "triton", "typer",
    "typing-extensions", "urllib3", "xxhash"
]
# fmt: on
# Not on the image although this environment's versions of its distributions may require them (typer
# here requires pydantic): the requirement walk stops there, so only the pinned wheels bring them.
NOT_ON_IMAGE = {"pydantic", "pydantic-core", "pydantic-settings", "annotated-types", "typing-inspection"}
PHASES = ("features", "anchors", "mask", "forward", "backward", "optimizer")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requires(name: str) -> list[str]:
    try:
        reqs = md.requires(name) or []
    except md.PackageNotFoundError:
        return []
    return [_norm(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0]) for r in reqs if "extra ==" not in r]


def _closure(names: list[str]) -> set[str]:
    """The distributions `names` require, transitively (extras left out), short of NOT_ON_IMAGE."""
    seen: set[str] = set()
    todo = [_norm(n) for n in names]
    while todo:
        name = todo.pop()
        if name not in seen and name not in NOT_ON_IMAGE:
            seen.add(name)
            todo += _requires(name)
    return seen


def _pinned() -> dict[str, str]:
    lines = (line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines())
    return {_norm(n): v for n, v in (line.split("==") for line in lines if line)}


def _venv_with_only(keep: set[str], dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    site = next(dest.glob("lib/python*/site-packages"))
    linked = set()
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


def test_the_pinned_wheels_are_this_environments_and_complete() -> None:
    pinned = _pinned()
    assert {"pydantic", "pydantic-core"} <= set(pinned)
    assert pinned == {n: md.version(n) for n in pinned}  # the versions the tests here ran with
    image = _closure(GPU_IMAGE)
    for name in pinned:  # carried with --no-deps: what each requires is carried too, or on the image
        assert set(_requires(name)) <= set(pinned) | image, name


def _run(python: Path, cwd: Path, mixed_precision: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    script = ROOT / "benchmarks" / "gpu_trainer.py"
    args = ["--shape", "tiny", "--lengths", "16,32", "--mixed-precision", mixed_precision]
    r = subprocess.run(
        [python, str(script), *args],
        cwd=cwd,  # not the checkout: the script finds the project's packages itself
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert any(x.get("versions", {}).get("torch") for x in lines)  # what a failure report needs first
    rows = [x for x in lines if "summary" not in x and "versions" not in x]
    return rows, next(x["summary"] for x in lines if "summary" in x)


def test_the_gpu_benchmark_runs_on_the_gpu_image_plus_the_pinned_wheels(tmp_path: Path) -> None:
    python = _venv_with_only(_closure(GPU_IMAGE) | set(_pinned()), tmp_path / "venv")
    for absent in ("pydantic_settings", "fastapi"):  # the project's other needs are really not there
        probe = subprocess.run([python, "-c", f"import {absent}"], capture_output=True, check=False)
        assert probe.returncode != 0, absent
    runs = {mp: _run(python, tmp_path, mp) for mp in ("bf16", "no")}
    for rows, summary in runs.values():
        assert [r for r in rows if "error" in r] == []
        grid = [r for r in rows if r["kind"] == "train"]
        assert [(r["length"], r["source"]) for r in grid] == [
            (n, s) for n in (16, 32) for s in ("hf", "cache")
        ]
        assert summary["complete"]
        assert summary["rows"] == 9
        assert summary["attention"] == "sdpa (dense mask)"  # CPU: flex attention has no backward here
        assert summary["recompiles"] == summary["guard_failures"] == 0
        for r in grid:
            assert all(r[f"{p}_s"] > 0 for p in PHASES), r
            assert r["steps"] == 2
            assert r["tok_s"] > 0
            assert math.isfinite(r["loss"])
            # two sessions of two calls, the second sharing half the first: 1.5 calls computed each
            assert r["step_tokens"] == 2 * (r["length"] + r["length"] // 2)
        assert all(r["cache_mib"] > 0 and r["cache_write_s"] > 0 for r in grid if r["source"] == "cache")
        extra = {r["kind"]: r for r in rows if r["kind"] != "train"}
        assert extra["one-segment"]["step_tokens"] == 2 * 16  # two single-call sessions, nothing shared
        assert (
            extra["split"]["parts"] >= 2
        )  # a session longer than max_len: parts that are steps of their own
        prefetched = extra["cached-prefetch"]
        assert prefetched["steps"] == prefetched["kept"] == 3  # the second epoch read every step kept
        assert prefetched["epoch2_step_s"] > 0
        assert extra["heldout"]["blocks"] > 0
        assert math.isfinite(extra["heldout"]["loss"])
        assert extra["flex-vs-dense"]["rel_diff"] < 1e-2  # the block mask is the dense mask
    # the same data, seeds and drafter: bf16 mixed precision trains the same first step as float32
    for bf16, fp32 in zip(runs["bf16"][0][:2], runs["no"][0][:2], strict=True):
        assert bf16["loss_first"] == pytest.approx(fp32["loss_first"], rel=0.02)
