"""A runner told to stop stores what has ended and gives back the rest: SIGTERM to a runner process (as a
dying driver's parent-death signal or Kubernetes sends it) leaves the sessions whose agents were cut claimable
at once, attempts uncounted, and a session whose agent had ended is stored, not run a second time."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

from sqlalchemy import select

from factory.db import Session
from factory.run import queue
from factory.run.stopping import give_back

from .test_runner import events, setup_db, spawn


class Held:
    def __init__(self) -> None:
        self.in_flight: set[str] = set()
        self.recording: set[str] = set()


def test_give_back_releases_running_sessions_and_waits_for_those_being_stored(tmp_path, sqlite_url):
    sessions, _ = setup_db(sqlite_url, tmp_path, repos=1, issues=1)
    running = queue.claim(sessions, "w0", lease_s=600, max_attempts=3)
    ended = queue.claim(sessions, "w0", lease_s=600, max_attempts=3)
    assert running is not None
    assert ended is not None
    held, lock = Held(), threading.Lock()
    held.in_flight = {running.id, ended.id}
    held.recording = {ended.id}  # its agent ended: being stored

    def store() -> None:  # the worker thread storing it, a moment later
        time.sleep(0.5)
        with lock:
            held.recording.discard(ended.id)

    worker = threading.Thread(target=store)
    worker.start()
    t0 = time.monotonic()
    released = give_back(sessions, held, lock, ["w0"], grace_s=10)
    waited = time.monotonic() - t0
    worker.join()
    assert released == [running.id]
    assert waited >= 0.4  # it waited for the one being stored
    with sessions() as s:
        rows = {r.id: r for r in s.scalars(select(Session).where(Session.id.in_([running.id, ended.id])))}
    assert rows[running.id].status == "pending"
    assert rows[running.id].attempts == 0  # the cut attempt is not counted
    assert rows[ended.id].status == "running"  # still its owner's, to store
    assert rows[ended.id].lease_owner is not None


def test_sigterm_gives_the_sessions_in_flight_back_at_once(tmp_path: Path, sqlite_url: str) -> None:
    sessions, total = setup_db(sqlite_url, tmp_path, repos=1, issues=2)
    log = tmp_path / "runs.jsonl"
    p = spawn(sqlite_url, tmp_path, log, concurrency=2, sleep=30, lease=600)  # sessions that outlast the test
    deadline = time.time() + 60
    while sum(e["event"] == "start" for e in events(log)) < 2:
        assert time.time() < deadline, "hang guard: the runner started no two sessions in 60 s"
        assert p.poll() is None, p.communicate()
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)  # at once: not after the sessions' 30 s
    assert json.loads(out.splitlines()[-1]) == {"stopped": True}, err
    # both leases given back, not left to expire in 600 s or to be reclaimed by the next start on this host
    assert queue.counts(sessions) == {"pending": total}
    with sessions() as s:
        assert set(s.scalars(select(Session.attempts))) == {0}
