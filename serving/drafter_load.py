"""Does vLLM load this drafter, every tensor of it? Asked of vLLM itself (serving/vllm_load.py, run by the
vLLM environment's interpreter): the architecture it resolves, the tensors it consumes, any parameter it
leaves unloaded, and its refusal when this machine's vLLM cannot serve the method."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from serving.errors import ServingError
from serving.venv import python

SCRIPT = Path(__file__).with_name("vllm_load.py")


def vllm_load(
    target: str | Path, draft: str | Path, method: str, tokens: int, timeout: float = 600
) -> dict[str, Any]:
    """vLLM's account of loading ``draft`` (a drafter folder) for ``target`` (a model folder)."""
    argv = [str(python()), str(SCRIPT), str(target), str(draft), method, str(tokens)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise DrafterLoadError(f"vLLM could not load {draft}: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def check_loads(target: str | Path, draft: str | Path, method: str, tokens: int) -> dict[str, Any]:
    """vLLM's account (as `vllm_load`); raises DrafterLoadError when it leaves a drafter tensor unloaded."""
    got = vllm_load(target, draft, method, tokens)
    if got["unloaded"]:
        raise DrafterLoadError(
            f"vLLM's loader leaves {len(got['unloaded'])} parameter(s) of {draft} unloaded "
            f"({', '.join(got['unloaded'][:6])}): served, they would be uninitialised memory"
        )
    return got


class DrafterLoadError(ServingError, RuntimeError):
    """vLLM cannot load a drafter, or loads it with a parameter left unfilled."""
