"""What a run started on this host, written under its data folder so that once the run is dead a later run
(or `python -m factory reap`) can remove it all.

A run's ledger (`DATA_DIR/runs/<run id>.json`) names its owner (host, pid and the process's start time, so a
reused pid is told apart), the processes it started (pid and start time each), whether it started sandboxes
(their containers, networks and firewall rules carry the run id in their labels and rule comments) and the
spool folder its proxy wrote. Nothing is ever chosen by a name pattern: only what a dead owner recorded, or
labelled with its run id, is removed. `DataDirLock` keeps a second live run off the same data folder.

The owner token is the one sandboxes write in their `dflash.sandbox.owner` label (`sandboxes.labels`), so a
run and its containers are judged alive or dead the same way.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import signal
import time
from pathlib import Path

from pydantic import BaseModel, Field

from factory.errors import FactoryError
from records.atomic import write_text
from sandboxes.labels import owner_alive, owner_token, process_start_time

RUNS_DIR = "runs"
LOCK_FILE = "run.lock"


class ProcessEntry(BaseModel):
    name: str = Field(description="What the process is (target, proxy).")
    pid: int = Field(description="Its process id; it leads its own process group.")
    start: str | None = Field(
        description="Its start time in clock ticks since boot (tells a reused pid apart)."
    )


class RunLedger(BaseModel):
    run_id: str = Field(description="The run's id; its sandboxes carry it in the `dflash.sandbox.run` label.")
    owner: str = Field(description="host:pid:start time of the run's own process.")
    started_at: str = Field(description="When the run started (UTC, ISO 8601).")
    sandboxes: bool = Field(
        default=False, description="Whether the run starts sandboxes (containers, networks, rules)."
    )
    processes: list[ProcessEntry] = Field(default_factory=list, description="Services the run started.")
    spool_dir: str | None = Field(default=None, description="The spool folder of a proxy the run started.")


def ledger_dir(data_dir: Path) -> Path:
    return data_dir / RUNS_DIR


def process_alive(entry: ProcessEntry) -> bool:
    return entry.start is not None and process_start_time(entry.pid) == entry.start


def stop_process(entry: ProcessEntry, grace_s: float = 10.0) -> bool:
    """SIGTERM the process's group, SIGKILL after `grace_s`; False when it was already gone."""
    if not process_alive(entry):
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(entry.pid, sig)  # the services lead their own group: this reaches their children too
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and process_alive(entry):
            time.sleep(0.1)
        if not process_alive(entry):
            return True
    return not process_alive(entry)


class Ledger:
    """The live run's own ledger: rewritten atomically on every change, removed on a clean end."""

    def __init__(self, data_dir: Path, run_id: str, *, sandboxes: bool = False) -> None:
        self.path = ledger_dir(data_dir) / f"{run_id}.json"
        self.record = RunLedger(
            run_id=run_id,
            owner=owner_token(),
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            sandboxes=sandboxes,
        )
        self.save()

    def add_process(self, name: str, pid: int) -> None:
        self.record.processes.append(ProcessEntry(name=name, pid=pid, start=process_start_time(pid)))
        self.save()

    def set_spool(self, spool_dir: Path) -> None:
        self.record.spool_dir = str(spool_dir)
        self.save()

    def save(self) -> None:
        write_text(self.path, self.record.model_dump_json(indent=1))

    def close(self) -> None:
        """A clean end: everything it started is stopped, nothing is left to reap."""
        self.path.unlink(missing_ok=True)


def read_ledgers(data_dir: Path) -> list[tuple[Path, RunLedger]]:
    found = []
    for path in sorted(ledger_dir(data_dir).glob("*.json")):
        try:
            found.append((path, RunLedger.model_validate_json(path.read_text())))
        except (OSError, ValueError):
            continue  # half-written by a run killed mid-save: its .tmp is all it left
    return found


def dead_ledgers(data_dir: Path) -> list[tuple[Path, RunLedger]]:
    return [(p, rec) for p, rec in read_ledgers(data_dir) if not owner_alive(rec.owner)]


class DataDirBusy(FactoryError, RuntimeError):
    """Another live run holds the data folder."""


class DataDirLock:
    """An exclusive `flock` on DATA_DIR/run.lock for the run's lifetime; the kernel drops it when the
    process dies however it dies, so a killed run never leaves a stale lock behind."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> DataDirLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirBusy(
                f"{self.path.parent} is in use by a live run ({holder}); "
                "wait for it to finish or stop it, or use another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        host, pid, _ = owner_token().split(":", 2)
        os.pwrite(
            fd, f"pid {pid} on {host}, since {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC".encode(), 0
        )
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
