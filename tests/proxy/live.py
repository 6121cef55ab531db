"""Real processes on loopback for proxy tests: the scripted upstream and `python -m proxy serve`."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
def scripted_upstream(apis: str = "all") -> Iterator[str]:
    port = free_port()
    args = ["-m", "tests.fakes.scripted_upstream", "--port", str(port), "--apis", apis]
    with background(args, f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def proxy_server(upstream: str, data_dir: Path, *extra: str, log: Path | None = None) -> Iterator[LiveProxy]:
    """`python -m proxy serve` for the block; with `log`, its log (stderr) is appended to that file."""
    port = free_port()
    args = ["-m", "proxy", "serve", "--upstream", upstream, "--port", str(port), "--data-dir", str(data_dir)]
    with background(
        [*args, "--segment-max-age-s", "0.5", *extra], f"http://127.0.0.1:{port}/healthz", stderr=log
    ) as proc:
        yield LiveProxy(f"http://127.0.0.1:{port}", data_dir, proc)
