"""`python -m serving serve`: resolve the model, then become the vLLM server (exec, same pid).

Exec keeps the process the caller started (its process group, its parent-death signal, the run ledger's
pid) the server's own, so the lifecycle rules that hold for the CPU stand-in hold for vLLM unchanged.
"""

from __future__ import annotations

import os

from serving.launch import SMOLLM2, VllmServer
from serving.venv import availability
from standin.loading import cache_root, smollm2_folder


class ServeError(RuntimeError):
    """vLLM cannot be started here (not installed, or no model folder)."""


def model_path(model: str) -> str:
    """`smollm2` → the cached safetensors folder (converted from the bundled GGUF once); else as given."""
    if model == SMOLLM2:
        return str(smollm2_folder(cache_root()))
    return model


def exec_server(settings: VllmServer) -> None:
    have = availability()
    if not have.ok:
        raise ServeError(have.line())
    argv = settings.argv(model_path(settings.model))
    os.execve(argv[0], argv, settings.env())
