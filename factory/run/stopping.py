"""A runner process told to stop — Ctrl-C, or SIGTERM from a supervisor, a dying parent (the parent-death
signal of `clikit.children`) or Kubernetes — gives back what it holds instead of dying with it.

Python's default for SIGTERM is to die at once: the sessions in flight then wait for the next start on this
host (or their leases' end elsewhere) to run again, and an agent that had already ended but was not yet
stored runs a second time. Stopping cleanly, the runner stores every result it holds and releases only the
sessions whose agents are still running, so another runner claims them at once."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.run import queue

log = logging.getLogger(__name__)


class Holding(Protocol):
    """What a runner holds: the sessions in flight, and those whose agent has ended and are being stored."""

    in_flight: set[str]
    recording: set[str]


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does (nothing changes elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def give_back(
    sessions: sessionmaker[OrmSession],
    held: Holding,
    lock: threading.Lock,
    owners: list[str],
    grace_s: float = 30.0,
) -> list[str]:
    """Release the leases of the sessions whose agents still run, then wait (up to `grace_s`) until those
    whose agents have ended are stored; returns the released ids."""
    with lock:
        # an agent ending between this line and the release is released too, and runs again: the runner
        # marks a result as being stored as soon as its session runner returns it, so the gap is that short
        running = sorted(held.in_flight - held.recording)
    for owner in owners:
        queue.release(sessions, running, owner)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        with lock:
            if not held.recording:
                return running
        time.sleep(0.05)
    with lock:
        log.warning(
            "stopping: %d ended session(s) still not stored after %.0f s", len(held.recording), grace_s
        )
    return running
