"""Real vLLM CPU servers for the tests marked `vllm` (make vllm installs the engine; CI runs them).

Each server is `python -m serving serve` — the command a user's `make target` and `make bench` run — started
eager (`--no-compile`: about a minute instead of three), on a free loopback port, in its own process group,
stopped when the session (or module) ends. Two targets: SmolLM2 (the project's default, for the agents'
wire formats) and tiny-qwen3 saved as a model folder (a Qwen3 architecture vLLM's DFlash path expects, fast
enough to serve several drafters in one test session).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lm import Target
from serving.venv import availability
from tests.support import free_port
from trainer.replay.servers import wait_healthy

pytestmark = pytest.mark.vllm


@contextlib.contextmanager
def vllms(servers: dict[str, tuple[str, ...]], logs: Path, timeout: float = 600) -> Iterator[dict[str, str]]:
    """vLLM servers started at once (label → `python -m serving serve` arguments), their URLs while the block
    runs. Started together, not one after the other: most of a start is Python importing in three processes,
    one core each, so on 2 cores several starts take little longer than one."""
    have = availability()
    if not have.ok:
        pytest.skip(have.line())
    procs: dict[str, tuple[subprocess.Popen[bytes], str, Path]] = {}
    try:
        for label, args in servers.items():
            port, log = free_port(), logs / f"{label}.log"
            argv = [sys.executable, "-m", "serving", "serve", "--port", str(port), "--no-compile", *args]
            with log.open("wb") as out:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            procs[label] = (proc, f"http://127.0.0.1:{port}", log)
        deadline = time.monotonic() + timeout
        for proc, url, log in procs.values():  # the bench's own wait: a server that exits fails at once
            wait_healthy(url, proc, max(0.0, deadline - time.monotonic()), log)
        yield {label: url for label, (_, url, _) in procs.items()}
    finally:
        for proc, _, _ in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _, _ in procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class Waves:
    """vLLM servers started in waves of at most `at_once` in their declared order, a wave's servers stopped
    when a label of another wave is asked: each server holds ≈ 3.5 GiB here (three processes and its KV
    cache), so five at once would not fit beside the rest of a 24 GiB machine, while three take about as
    long to start as one."""

    def __init__(self, servers: dict[str, tuple[str, ...]], logs: Path, at_once: int = 3) -> None:
        labels = list(servers)
        self.waves = [labels[i : i + at_once] for i in range(0, len(labels), at_once)]
        self.servers, self.logs = servers, logs
        self.stack = contextlib.ExitStack()
        self.urls: dict[str, str] = {}

    def __getitem__(self, label: str) -> str:
        if label not in self.urls:
            self.close()
            wave = next(w for w in self.waves if label in w)
            self.urls = self.stack.enter_context(vllms({k: self.servers[k] for k in wave}, self.logs))
        return self.urls[label]

    def close(self) -> None:
        self.stack.close()
        self.urls = {}


@contextlib.contextmanager
def vllm(model: str, log: Path, *args: str, timeout: float = 600) -> Iterator[str]:
    """One vLLM server of `model` (extra `args` for `python -m serving serve`), its URL while the block runs."""
    with vllms({log.stem: ("--model", model, "--kv-cache-gib", "1", *args)}, log.parent, timeout) as urls:
        yield urls[log.stem]


@pytest.fixture(scope="session")
def smollm2_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """SmolLM2 as `make target` serves it (tools template, hermes parser), with a 16k context."""
    with vllm("smollm2", tmp_path_factory.mktemp("vllm") / "smollm2.log", "--max-model-len", "16384") as url:
        yield url


@pytest.fixture(scope="session")
def tiny_dir(tiny: Target, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-qwen3 as a model folder vLLM loads (float32 weights, the real Qwen3 tokenizer)."""
    out = tmp_path_factory.mktemp("tiny-qwen3")
    tiny.model.save_pretrained(out)
    tiny.tokenizer.save_pretrained(out)
    return out
