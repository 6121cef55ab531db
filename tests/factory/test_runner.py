"""The runner: concurrent workers never run a session twice, infrastructure failures retry with
backoff, finished sessions never run again, and a killed runner resumes with nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from sqlalchemy import select, update

from factory.db import Session, connect, session_factory, utcnow
from factory.rehearse.probe import NO_WORK
from factory.run import queue
from factory.run.fake_runner import FakeSessionRunner
from factory.run.plan import PlanConfig, plan
from factory.run.runner import RunConfig, Runner

from .helpers import seed

ROOT = Path(__file__).resolve().parents[2]


def events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def setup_db(url: str, tmp_path: Path, repos: int = 2, issues: int = 3) -> tuple:
    sessions = session_factory(connect(url))
    seed(sessions, tmp_path / "repo", repos=repos, issues=issues)
    total = plan(sessions, PlanConfig(seed=0)).total
    return sessions, total


def spawn(url: str, tmp_path: Path, log: Path, **kw) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        "tests.factory.run_fake",
        "--db",
        url,
        "--data-dir",
        str(tmp_path / "data"),
        "--log",
        str(log),
    ]
    for k, v in kw.items():
        args += [f"--{k}", str(v)]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_processes_never_run_a_session_twice(tmp_path, db_url):
    sessions, total = setup_db(db_url, tmp_path, repos=3, issues=4)  # 72 sessions
    log = tmp_path / "runs.jsonl"
    procs = [spawn(db_url, tmp_path, log, concurrency=4, sleep=0.2) for _ in range(3)]
    for p in procs:
        _out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    starts = Counter(e["session"] for e in events(log) if e["event"] == "start")
    assert len(starts) == total
    assert set(starts.values()) == {1}
    assert len({e["pid"] for e in events(log)}) >= 2  # the work really was shared
    assert queue.counts(sessions) == {"done": total}


def test_kill_and_resume_loses_and_duplicates_nothing(tmp_path, db_url):
    sessions, total = setup_db(db_url, tmp_path, repos=2, issues=4)  # 48 sessions
    log = tmp_path / "runs.jsonl"
    p = spawn(db_url, tmp_path, log, concurrency=3, sleep=0.5, lease=600)
    deadline = time.time() + 120

    def count(event: str) -> int:
        return sum(e["event"] == event for e in events(log))

    while count("finish") < 6:
        assert time.time() < deadline, "hang guard: the runner did not finish 6 sessions in 120 s"
        assert p.poll() is None
        time.sleep(0.02)
    # kill right after a session starts: it is then in flight for 0.5 s
    starts = count("start")
    while count("start") == starts:
        assert time.time() < deadline, "hang guard: the runner started no further session in 120 s"
        assert p.poll() is None
        time.sleep(0.005)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with sessions() as s:
        running = set(s.scalars(select(Session.id).where(Session.status == "running")))
        done_before = set(s.scalars(select(Session.id).where(Session.status == "done")))
    assert running
    assert done_before
    # The leases are 600 s: the new runner finishing everything (within the 120 s hang guard) needs the dead
    # runner's leases reclaimed at its start, which it says it did, for exactly the sessions left running.
    p2 = spawn(db_url, tmp_path, log, concurrency=3, sleep=0.0)
    _out, err = p2.communicate(timeout=120)
    assert p2.returncode == 0, err
    assert f"resuming {len(running)} session(s) left running by a killed runner" in err, err
    assert queue.counts(sessions) == {"done": total}
    with sessions() as s:
        rows = {r.id: r for r in s.scalars(select(Session))}
    # finished sessions were not run again; only those in flight at the kill ran a second time
    second = Counter(e["session"] for e in events(log) if e["event"] == "start")
    rerun = {sid for sid, n in second.items() if n > 1}
    assert rerun <= running
    assert not (rerun & done_before)
    for sid in running:
        assert rows[sid].attempts == 2
        assert rows[sid].proxy_session_id == f"{sid}-a2"
    assert all(rows[sid].attempts == 1 for sid in done_before)
    assert all(r.patch and r.transcript_path and Path(r.transcript_path).exists() for r in rows.values())


def test_infra_failures_retry_with_backoff_then_fail(tmp_path, sqlite_url):
    sessions, total = setup_db(sqlite_url, tmp_path, repos=1, issues=1)  # 6 sessions
    with sessions() as s:
        ids = list(s.scalars(select(Session.id).order_by(Session.priority)))
    flaky, broken = ids[0], ids[1]
    fake = FakeSessionRunner(infra_failures={flaky: 1, broken: 99})
    cfg = RunConfig(
        proxy_url="http://x",
        data_dir=tmp_path / "d",
        concurrency=2,
        backoff_s=0.2,
        poll_s=0.05,
        max_attempts=3,
    )
    t0 = time.monotonic()
    stats = Runner(sessions, fake, cfg).run()
    assert time.monotonic() - t0 >= 0.2 + 0.4  # the broken one waited 0.2 s, then 0.4 s
    assert stats.done == total - 1
    assert stats.infra_failed == 1
    assert stats.infra_retries == 3
    with sessions() as s:
        rows = {r.id: r for r in s.scalars(select(Session))}
    assert rows[flaky].status == "done"
    assert rows[flaky].attempts == 2
    assert rows[broken].status == "failed"
    assert rows[broken].attempts == 3
    assert "scripted infrastructure failure on attempt 3" in rows[broken].error


def test_finished_sessions_are_never_claimed_again(tmp_path, db_url):
    sessions, total = setup_db(db_url, tmp_path, repos=1, issues=1)
    fake = FakeSessionRunner(log_path=tmp_path / "log")
    cfg = RunConfig(proxy_url="http://x", data_dir=tmp_path / "d", concurrency=2, poll_s=0.05)
    assert Runner(sessions, fake, cfg).run().done == total
    # even with every lease looking expired, nothing is claimable
    with sessions.begin() as s:
        s.execute(update(Session).values(lease_expires_at=utcnow()))
    assert queue.claim(sessions, "x", lease_s=10, max_attempts=3) is None
    assert Runner(sessions, fake, cfg).run().done == 0
    assert len(events(tmp_path / "log")) == 2 * total


def test_limit_and_lost_lease(tmp_path, sqlite_url):
    sessions, total = setup_db(sqlite_url, tmp_path, repos=1, issues=2)
    cfg = RunConfig(proxy_url="http://x", data_dir=tmp_path / "d", concurrency=3, limit=4, poll_s=0.05)
    assert Runner(sessions, FakeSessionRunner(), cfg).run().done == 4
    assert queue.counts(sessions) == {"done": 4, "pending": total - 4}
    c = queue.claim(sessions, "me", lease_s=0.01, max_attempts=3)
    assert c is not None
    time.sleep(0.05)
    other = queue.claim(sessions, "thief", lease_s=60, max_attempts=3)
    assert other is not None
    assert other.id == c.id
    assert other.attempt == 2
    now = utcnow()
    assert not queue.finish(sessions, c, "me", NO_WORK, transcript_path=None, started_at=now, finished_at=now)
