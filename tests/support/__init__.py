"""Helpers shared by tests: free ports and background server processes on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from clikit.children import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def torchrun(module: str, *args: str, procs: int = 2) -> subprocess.CompletedProcess[str]:
    """`python -m module args` in `procs` processes under torch.distributed.run (what `accelerate launch`
    runs for a multi-process job; on CPU, gloo), one intra-op thread each, from the repository root."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs)]
    cmd += ["--master_port", str(free_port()), "-m", module, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def last_json(stdout: str) -> object:
    """The last line of a command's stdout that parses as JSON.

    Ray prints its own warnings on stdout too ("raylet has lagging heartbeats" on a busy machine), so a
    command's JSON answer is not always its last line."""
    for line in reversed(stdout.strip().splitlines()):
        with contextlib.suppress(ValueError):
            return json.loads(line)
    raise AssertionError(f"no JSON line in: {stdout[-2000:]}")


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


@contextlib.contextmanager
def background(
    args: list[str],
    ready_url: str,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    stderr: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `python -m ...`-style args in a subprocess until the block ends; kill it afterwards. With
    `stderr`, the process's stderr (its log) goes to that file (appended) instead of the test's."""
    cmd = [sys.executable, *args] if args[0] == "-m" else args
    with contextlib.ExitStack() as files:
        err = files.enter_context(stderr.open("ab")) if stderr is not None else None
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env={**os.environ, **(env or {})}, stderr=err)
    try:
        wait_http(ready_url, timeout=timeout, proc=proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
