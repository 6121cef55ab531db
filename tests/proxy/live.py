"""Real processes on loopback for proxy tests: the scripted upstream, the CPU stand-in target and
`python -m proxy serve`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow.dataset as ds

from tests.support import REPO_ROOT, background, free_port


@dataclass
class LiveProxy:
    url: str
    data_dir: Path
    proc: subprocess.Popen[bytes]

    def rows(self, **filters: Any) -> list[dict[str, Any]]:
        """Every call record in Parquet, once the spool is empty (the live proxy rolls its own segments)."""
        deadline = time.monotonic() + 15
        while any((self.data_dir / "spool").glob("*.spool")) and time.monotonic() < deadline:
            roll(self.data_dir)  # rolls what a dead proxy left; live segments are skipped
            time.sleep(0.1)
        calls = self.data_dir / "calls"
        if not calls.exists():
            return []
        rows = ds.dataset(calls).to_table().to_pylist()
        return [r for r in rows if all(r.get(k) == v for k, v in filters.items())]


def roll(data_dir: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "proxy", "roll", "--data-dir", str(data_dir)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


@contextlib.contextmanager
def loopback_server(module: str, *args: str, timeout: float = 60.0) -> Iterator[str]:
    """`python -m module args --port P` on a free loopback port until its /health answers; yields its URL."""
    port = free_port()
    with background(
        ["-m", module, *args, "--port", str(port)], f"http://127.0.0.1:{port}/health", timeout=timeout
    ):
        yield f"http://127.0.0.1:{port}"


def scripted_upstream(apis: str = "all") -> contextlib.AbstractContextManager[str]:
    return loopback_server("tests.fakes.scripted_upstream", "--apis", apis)


def standin_target(max_model_len: int, *args: str, timeout: float) -> contextlib.AbstractContextManager[str]:
    """The CPU stand-in target (`python -m trainer serve-target`) serving the tiny Qwen3."""
    model = ("--model", "tiny-qwen3", "--max-model-len", str(max_model_len))
    return loopback_server("trainer", "serve-target", *model, *args, timeout=timeout)


@contextlib.contextmanager
def proxy_server(upstream: str, data_dir: Path, *extra: str, log: Path | None = None) -> Iterator[LiveProxy]:
    """`python -m proxy serve` for the block; with `log`, its log (stderr) is appended to that file."""
    port = free_port()
    args = ["-m", "proxy", "serve", "--upstream", upstream, "--port", str(port), "--data-dir", str(data_dir)]
    with background(
        [*args, "--segment-max-age-s", "0.5", *extra], f"http://127.0.0.1:{port}/healthz", stderr=log
    ) as proc:
        yield LiveProxy(f"http://127.0.0.1:{port}", data_dir, proc)


def kill_9_under_load(
    upstream: str,
    data_dir: Path,
    request: tuple[str, dict[str, Any]],
    workers: int,
    until: int,
    *,
    timeout_s: float = 10,
    stream_end: bytes = b"",
) -> tuple[list[str], list[str]]:
    """`workers` clients post `request` (path, body) to a live proxy, every other call streamed from the
    scripted upstream's `bench-40`, until `until` calls were answered (a 200, and a stream whose body holds
    `stream_end`); then the proxy gets SIGKILL. Returns the answered session ids and the recorded ones (one
    per record, so duplicates show)."""
    path, body = request
    completed: list[str] = []
    stop = threading.Event()

    def client(worker: int) -> None:
        with httpx.Client(timeout=timeout_s) as c:
            for i in range(100_000):
                if stop.is_set():
                    return
                sid = f"load-{worker}-{i}"
                try:
                    r = c.post(
                        f"{proxy.url}/s/{sid}{path}", json={**body, "model": "bench-40", "stream": i % 2 == 0}
                    )
                except httpx.HTTPError:
                    return
                if r.status_code == 200 and (i % 2 == 1 or stream_end in r.content):
                    completed.append(sid)

    with proxy_server(upstream, data_dir) as proxy:
        threads = [threading.Thread(target=client, args=(w,)) for w in range(workers)]
        for t in threads:
            t.start()
        while len(completed) < until:
            time.sleep(0.05)
        os.kill(proxy.proc.pid, signal.SIGKILL)
        stop.set()
        for t in threads:
            t.join()
    return completed, [r["session_id"] for r in proxy.rows()]
