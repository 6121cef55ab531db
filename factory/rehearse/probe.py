"""The queue alone: claim and finish with no work, on a copy of the rehearsal's queue (a file copy of SQLite; a
`CREATE DATABASE … TEMPLATE` of PostgreSQL), by many threads — the ceiling the queue puts on a campaign,
apart from the sessions' own time."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from factory.db import connect, session_factory, utcnow
from factory.run import queue
from factory.run.runner_types import SessionOutcome

# What a session that did no work reports: the queue's own cost is all that is measured.
NO_WORK = SessionOutcome(exit_status=0, patch="", transcript=[], agent_session_id=None)


@contextlib.contextmanager
def _copy(url: str) -> Iterator[str]:
    """A throwaway copy of the queue at `url`: its URL for the block, removed after."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(u.database or "", Path(tmp) / "probe.db")
            yield f"sqlite:///{Path(tmp) / 'probe.db'}"
        return
    name = f"dflash_probe_{secrets.token_hex(4)}"
    admin = create_engine(u.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{u.database}"'))
        yield u.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def claims_per_s(url: str, threads: int, seconds: float, release: Engine | None = None) -> dict[str, object]:
    """`release`: the caller's engine on `url`, disposed first (PostgreSQL copies only an idle database)."""
    if release is not None:
        release.dispose()
    with _copy(url) as copy:
        engine = connect(copy)
        sessions = session_factory(engine)
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
                    sessions, c, owner, NO_WORK, transcript_path=None, started_at=now, finished_at=now
                )
                done[i] += 1

        t0 = time.monotonic()
        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.monotonic() - t0
        engine.dispose()
    backend = make_url(url).get_backend_name()
    return {
        "backend": backend,
        "threads": threads,
        "seconds": round(elapsed, 2),
        "claims_per_s": round(sum(done) / elapsed, 1),
    }
