"""`python -m serving serve`: resolve the model, then become the vLLM server (exec, same pid).

Exec keeps the process the caller started (its process group, its parent-death signal, the run ledger's
pid) the server's own, so the lifecycle rules that hold for the CPU stand-in hold for vLLM unchanged.
"""

from __future__ import annotations

import os

from lm.loading import cache_root, smollm2_folder, tiny_qwen3_folder
from serving.errors import ServingError
from serving.launch import SMOLLM2, TINY_QWEN3, VllmServer
from serving.venv import availability


class ServeError(ServingError, RuntimeError):
    """vLLM cannot be started here (not installed, or no model folder)."""


def model_path(model: str) -> str:
    """The built-in targets' cached folders (SmolLM2 converted from the bundled GGUF, tiny-qwen3 saved from
    its seed), made once; a folder or Hub name as given."""
    if model == SMOLLM2:
        return str(smollm2_folder(cache_root()))
    if model == TINY_QWEN3:
        return str(tiny_qwen3_folder(cache_root()))
    return model


def exec_server(settings: VllmServer) -> None:
    have = availability()
    if not have.ok:
        raise ServeError(have.line())
    argv = settings.argv(model_path(settings.model))
    os.execve(argv[0], argv, settings.env())
