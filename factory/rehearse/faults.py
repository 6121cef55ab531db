"""The faults a rehearsal injects: kill -9 of a proxy, a runner process or the driver; a PostgreSQL restart;
the data folder's filesystem filled for a while. Each returns one line saying what it did (or why not)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import psutil
from sqlalchemy.engine import make_url

from factory.rehearse.options import RehearseOptions

BALLAST = ".rehearsal-ballast"
# A process's part, by a piece of its command line; the agents' own work is their checkout and tool commands.
_KINDS = (
    ("brain", "rehearsal serve"),
    ("proxy", "proxy serve"),
    ("runner", "factory run"),
    ("watcher", "factory reap"),
    ("agent work", "bash -c"),
    ("agent work", "git"),
    ("agent work", "tar -x"),
)


def tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def kind_of(p: psutil.Process) -> str | None:
    """Which part of the rehearsal a process is, from its command line."""
    try:
        cmd = " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    for kind, mark in _KINDS:
        if mark in cmd:
            return kind
    return None


def _kill_one(driver: int, kind: str, rng: random.Random) -> tuple[str, int | None]:
    found = [p for p in tree(driver) if kind_of(p) == kind]
    if not found:
        return f"{kind}: none running", None
    victim = rng.choice(found)
    with contextlib.suppress(psutil.NoSuchProcess):
        victim.kill()
    return f"kill -9 {kind} pid {victim.pid}", victim.pid


def _postgres(opts: RehearseOptions) -> str:
    if not opts.db or not opts.db.startswith("postgresql"):
        return "postgres: skipped (the queue is SQLite; give --db postgresql://…)"
    port = make_url(opts.db).port or 5432
    listing = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        ver, name, cport = line.split()[:3]
        if int(cport) == port:
            r = subprocess.run(
                ["pg_ctlcluster", ver, name, "restart", "-m", "fast"], capture_output=True, text=True
            )
            return f"postgres {ver}/{name} restarted (rc {r.returncode}{': ' + r.stderr.strip()[-200:] if r.returncode else ''})"
    return f"postgres: skipped (no local cluster on port {port} that pg_ctlcluster manages)"


def _fill(opts: RehearseOptions) -> str:
    if not opts.disk_limit_mb or not os.path.ismount(opts.data_dir):
        return "disk: skipped (needs --disk-limit-mb: the data folder on a size-limited mount)"
    ballast = opts.data_dir / BALLAST
    free = shutil.disk_usage(opts.data_dir).free
    chunk = b"\0" * (1 << 16)
    with contextlib.suppress(OSError), ballast.open("wb", buffering=0) as fh:
        while True:  # until ENOSPC: space others free meanwhile is taken too
            fh.write(chunk)

    def release() -> None:
        time.sleep(opts.disk_full_s)
        ballast.unlink(missing_ok=True)

    threading.Thread(target=release, daemon=True).start()
    return f"disk: {free / 2**20:.0f} MiB filled for {opts.disk_full_s:g} s ({shutil.disk_usage(opts.data_dir).free} bytes left)"


def inject(
    kind: str, driver: subprocess.Popen[bytes], opts: RehearseOptions, rng: random.Random
) -> tuple[str, int | None]:
    """What was done, said in a line, and the pid it killed -9 (None: no process killed)."""
    if kind in ("proxy", "runner"):
        return _kill_one(driver.pid, kind, rng)
    if kind == "driver":
        driver.send_signal(signal.SIGKILL)
        return f"kill -9 driver pid {driver.pid}", driver.pid
    if kind == "postgres":
        return _postgres(opts), None
    return _fill(opts), None


def mount_limit(opts: RehearseOptions) -> str | None:
    """A tmpfs of --disk-limit-mb on the data folder (kept if it is already one); None: not asked."""
    if not opts.disk_limit_mb:
        return None
    opts.data_dir.mkdir(parents=True, exist_ok=True)
    if os.path.ismount(opts.data_dir):
        return f"{opts.data_dir} is already a mount"
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={opts.disk_limit_mb}m", "tmpfs", str(opts.data_dir)],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        raise RuntimeError(f"--disk-limit-mb: cannot mount a tmpfs on {opts.data_dir}: {r.stderr.strip()}")
    return f"tmpfs of {opts.disk_limit_mb} MiB mounted on {opts.data_dir}"
