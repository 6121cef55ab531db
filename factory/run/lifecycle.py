"""A run's life on its host: refuse a second live run on the same data folder, reap what dead runs of
that folder left (their services, sandboxes, firewall rules; then roll their proxy's spool), record what
this run starts, and remove its own leftovers however it ends: on the way out when it can, else through a
watcher process that outlives it only to reap it (and the next run's reap catches anything else)."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
from rich.console import Console

from factory.run.ledger import DataDirBusy, DataDirLock, Ledger
from factory.run.reap import ReapReport, reap_data_dir, watch
from factory.run.sandbox_runner import docker_client
from sandboxes.gc import collect

log = logging.getLogger(__name__)

__all__ = ["DataDirBusy", "preview", "reap", "run_scope", "watch_run"]


def new_run_id() -> str:
    return f"factory-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def _engine() -> Any:
    try:
        client = docker_client()
        client.ping()
    except docker.errors.DockerException as exc:
        raise RuntimeError(f"no Docker engine answers: {exc}") from exc
    return client


def reap(data_dir: Path, *, dry_run: bool = False) -> ReapReport:
    """What dead runs of `data_dir` left on this host, removed (or only listed with `dry_run`)."""
    return reap_data_dir(data_dir, _engine, dry_run=dry_run)


def watch_run(data_dir: Path, run_id: str) -> ReapReport | None:
    """Wait for run `run_id` of `data_dir` to end; reap it at once if it died (None: it ended cleanly)."""
    return watch(data_dir, run_id, _engine)


def preview(data_dir: Path) -> list[str]:
    """What a reap would remove now, as lines (for `factory status`); an unreachable engine is said so."""
    return reap(data_dir, dry_run=True).lines("would remove")


def _start_watcher(data_dir: Path, run_id: str) -> None:
    """A small process in a session of its own that outlives this run only to reap it if it dies (so a
    killed run's sandboxes do not wait for the next run); it exits as soon as the ledger is closed."""
    log_dir = data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "reaper.log").open("ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "factory", "reap", "--data-dir", str(data_dir), "--watch", run_id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@contextlib.contextmanager
def run_scope(
    data_dir: Path, console: Console, *, sandboxes: bool, exclusive: bool = True
) -> Iterator[Ledger]:
    """Hold the data folder (`exclusive`: a second live run on it is refused with `DataDirBusy`), reap
    the dead runs' leftovers, then yield this run's ledger. On the way out, whatever the reason, this
    run's own sandboxes still standing (a worker cut short by Ctrl-C) are removed and the ledger closed."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with DataDirLock(data_dir) if exclusive else contextlib.nullcontext():
        report = reap(data_dir)
        for line in report.lines():
            console.print(f"[bold]reap[/] {line}", soft_wrap=True)
        ledger = Ledger(data_dir, new_run_id(), sandboxes=sandboxes)
        _start_watcher(data_dir, ledger.record.run_id)
        try:
            yield ledger
        finally:
            if sandboxes:
                with contextlib.suppress(Exception):  # best effort: the next run reaps what is left
                    left = collect(docker_client(), run_id=ledger.record.run_id, everything=True)
                    for line in left.lines():
                        console.print(f"[bold]cleanup[/] {line}", soft_wrap=True)
            ledger.close()
