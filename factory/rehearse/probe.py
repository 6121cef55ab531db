"""The queue alone: claim and finish with no work, on a copy of a SQLite queue, by many threads — the
ceiling the queue puts on a campaign, apart from the sessions' own time."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

from factory.db import connect, session_factory, utcnow
from factory.run import queue


def claims_per_s(db_file: Path, threads: int, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "probe.db"
        shutil.copy(db_file, copy)
        sessions = session_factory(connect(f"sqlite:///{copy}"))
        done = [0] * threads
        deadline = time.monotonic() + seconds

        def work(i: int) -> None:
            owner = queue.owner_id(f"probe{i}")
            while time.monotonic() < deadline:
                c = queue.claim(sessions, owner, lease_s=60, max_attempts=3)
                if c is None:
                    return
                now = utcnow()
                queue.finish(
                    sessions,
                    c,
                    owner,
                    exit_status=0,
                    patch="",
                    transcript_path=None,
                    agent_session_id=None,
                    error=None,
                    started_at=now,
                    finished_at=now,
                )
                done[i] += 1

        t0 = time.monotonic()
        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.monotonic() - t0
    return {"threads": threads, "seconds": round(elapsed, 2), "claims_per_s": round(sum(done) / elapsed, 1)}
