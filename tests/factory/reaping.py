"""Helpers of the kill-and-restart tests: a `python -m factory harvest` process of its own, waits, and what
a run left behind (its ledger, its processes)."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from factory.run.ledger import ProcessEntry, process_alive

ROOT = Path(__file__).resolve().parents[2]


def harvest(
    data: Path, *args: str, env: dict[str, str] | None = None, limit: int = 1
) -> subprocess.Popen[str]:
    """A harvest of `limit` sessions in a session of its own, so the test can kill its whole process group."""
    full = {k: v for k, v in os.environ.items() if k not in ("TARGET_URL", "GITHUB_TOKEN", "DFLASH_DB_URL")}
    full |= {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    argv = [
        sys.executable,
        "-m",
        "factory",
        "harvest",
        "--data-dir",
        str(data),
        "--limit",
        str(limit),
        "--concurrency",
        "1",
        "--held-out",
        "0",
        *args,
    ]
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for(what: str, check: Callable[[], object], timeout_s: float = 120.0) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def records_written(proxy_url: str) -> int:
    try:
        text = httpx.get(f"{proxy_url}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0
    m = re.search(r"^dflash_proxy_records_written(?:\{[^}]*\})?\s+([0-9.e+]+)", text, re.M)
    return int(float(m.group(1))) if m else 0


def ledger(data: Path) -> dict[str, object] | None:
    files = sorted((data / "runs").glob("*.json"))
    return json.loads(files[0].read_text()) if files else None


def processes(led: dict[str, object]) -> list[ProcessEntry]:
    return [ProcessEntry.model_validate(p) for p in led["processes"]]  # type: ignore[attr-defined]


def finish(p: subprocess.Popen[str], timeout_s: float = 300) -> dict[str, object]:
    out, err = p.communicate(timeout=timeout_s)
    assert p.returncode == 0, (out[-3000:], err[-3000:])
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def kill9(p: subprocess.Popen[str], group: bool) -> None:
    if group:
        os.killpg(p.pid, signal.SIGKILL)
    else:
        p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)


def all_gone(entries: list[ProcessEntry]) -> bool:
    return not any(process_alive(e) for e in entries)


def _dead(proc: object) -> bool:
    import psutil

    assert isinstance(proc, psutil.Process)
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_watcher(run_id: str) -> int:
    """kill -9 the run's watcher (as an OOM kill or a crash taking everything would); returns its pid."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "--watch" in cmd and run_id in cmd:
            proc.kill()
            # Its parent, the run, never waits for it: dead means gone or a zombie.
            wait_for("the watcher to die", functools.partial(_dead, proc))
            return int(proc.pid)
    raise AssertionError(f"no watcher for {run_id}")
