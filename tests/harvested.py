"""A harvest's data folder without Docker or a target: sessions planned and run by the fake runner on a
SQLite queue, their calls written as the proxy writes them, with the tiny target's own token ids (each call
resends the history plus a tool result, so a session merges). What the export and the trainer share is
tested on it (tests/test_split_leakage.py, tests/trainer/data/test_published.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Session, connect, session_factory
from factory.run.fake_runner import FakeSessionRunner
from factory.run.plan import PlanConfig, plan
from factory.run.runner import RunConfig, Runner
from records.io import write_part
from tests.factory.helpers import seed
from tests.trainer.dflash.tiny import tiny_target, write_calls


def queue(tmp: Path) -> sessionmaker[OrmSession]:
    return session_factory(connect(f"sqlite:///{tmp / 'q.db'}"))


def harvested(tmp: Path, *, sessions: int, repos: int) -> list[dict[str, Any]]:
    """`tmp/data` with `sessions` finished sessions' calls (2 each) over `repos` repositories; the rows."""
    q = queue(tmp)
    seed(q, tmp / "repo", repos=repos, issues=2, korean=False)
    plan(q, PlanConfig(seed=0))
    cfg = RunConfig(proxy_url="http://x", data_dir=tmp / "data", concurrency=2, poll_s=0.05)
    Runner(q, FakeSessionRunner(), cfg).run()
    with q() as s:
        done = sorted(s.scalars(select(Session)), key=lambda x: x.proxy_session_id)[:sessions]
    rows = pq.read_table(
        write_calls(tiny_target(layers=4), tmp / "all.parquet", sessions=len(done), calls=2)
    ).to_pylist()
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for r in rows:
        sess = done[int(r.pop("session_id")[1:])]
        r.update(session_id=sess.proxy_session_id, started_at=t0 + dt.timedelta(seconds=r["started_at"]))
        r.update(
            call_id=f"{sess.proxy_session_id}:{r['call_id']}", request_json=json.dumps({"n": r["call_id"]})
        )
        del r["repo"], r["language"]
    write_part(rows, tmp / "data" / "calls", "part-0.parquet")
    return rows
