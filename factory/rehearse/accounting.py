"""What a rehearsal lost or did twice, counted from three independent witnesses: the agents' own log of
acknowledged calls (fsynced per call), the proxy's Parquet parts, and the queue."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import func, select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Session
from factory.publish.rows import part_files


@dataclass
class Ledger:
    acknowledged: int = 0  # calls the agents got a whole 200 answer for
    recorded_ok: int = 0  # calls in the parts with status 200 and outcome ok
    recorded_other: int = 0  # recorded calls that failed (the proxy's 5xx while restarting, cut streams…)
    lost: int = 0  # acknowledged but not in any part: must be 0
    lost_sessions: list[str] = field(default_factory=list)
    unacknowledged_recorded: int = 0  # recorded ok but never acknowledged (the agent was killed first)
    request_bytes: int = 0
    response_bytes: int = 0
    sessions_finished: int = 0  # attempts whose agent ran to its end
    completed_twice: int = 0  # sessions with two attempts that ran to their end: must be 0
    completed_twice_ids: list[str] = field(default_factory=list)
    # ran to its end again because the runner of the first end was killed -9 before it stored it: the
    # result died with the process, so the session had to run again (not a duplicate; bounded by the kills)
    redone_after_kill: int = 0
    queue: dict[str, int] = field(default_factory=dict)
    unfinished: int = 0  # sessions claimed at least once and neither done nor failed
    retried: int = 0  # sessions that needed more than one attempt

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["lost_sessions"] = self.lost_sessions[:20]
        out["completed_twice_ids"] = self.completed_twice_ids[:20]
        return out


def _acks(folder: Path) -> tuple[Counter[str], dict[str, list[int]]]:
    """Acknowledged calls per proxy session, and per factory session the runner pid of each attempt that
    ran to its end (each runner process logs to <pid>.jsonl)."""
    calls: Counter[str] = Counter()
    finished: dict[str, list[int]] = {}
    for f in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut by a kill -9 mid-write: it was never fsynced, so never counted
                continue
            if "finished" in rec:
                finished.setdefault(rec["finished"], []).append(int(f.stem))
            else:
                calls[rec["session"]] += 1
    return calls, finished


def _per_session_csv(path: Path, acked: Counter[str], ok: Counter[str]) -> None:
    """The evidence behind the two totals: one line per attempt (its proxy session id)."""
    lines = ["proxy_session_id,acknowledged,recorded_ok"]
    lines += [f"{sid},{acked.get(sid, 0)},{ok.get(sid, 0)}" for sid in sorted(set(acked) | set(ok))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def count(
    data_dir: Path, report_dir: Path, sessions: sessionmaker[OrmSession], killed: frozenset[int] = frozenset()
) -> Ledger:
    """The ledger; `killed`: the pids of the runners killed -9 on the way."""
    out = Ledger()
    acked, finished = _acks(report_dir / "acks")
    out.acknowledged = sum(acked.values())
    ok: Counter[str] = Counter()
    for f in part_files(data_dir / "calls"):
        t = pq.read_table(
            f, columns=["session_id", "status_code", "outcome", "request_json", "response_json"]
        )
        good = pc.and_(pc.equal(t["status_code"], 200), pc.equal(t["outcome"], "ok"))
        ok.update(s for s, g in zip(t["session_id"].to_pylist(), good.to_pylist(), strict=True) if g)
        out.recorded_other += t.num_rows - int(pc.sum(good).as_py() or 0)
        for col, attr in (("request_json", "request_bytes"), ("response_json", "response_bytes")):
            size = pc.sum(pc.binary_length(t[col].cast("large_binary"))).as_py() or 0
            setattr(out, attr, getattr(out, attr) + int(size))
    out.recorded_ok = sum(ok.values())
    _per_session_csv(report_dir / "ledger.csv", acked, ok)
    for sid, n in acked.items():
        if n > ok.get(sid, 0):
            out.lost += n - ok.get(sid, 0)
            out.lost_sessions.append(sid)
    out.unacknowledged_recorded = sum(max(0, n - acked.get(s, 0)) for s, n in ok.items())
    out.sessions_finished = sum(len(pids) for pids in finished.values())
    # Of a session's ends, one is stored; any other is forgiven only where its runner was killed -9 (a runner
    # stopped by SIGTERM stores what has ended first: factory/run/stopping.py).
    extra = {s: [p for p in pids if p not in killed] for s, pids in finished.items() if len(pids) > 1}
    twice = sorted(s for s, alive in extra.items() if len(alive) > 1)
    out.completed_twice, out.completed_twice_ids = len(twice), twice
    out.redone_after_kill = sum(len(finished[s]) - 1 for s in extra if s not in twice)
    with sessions() as s:
        out.queue = {
            k: int(v) for k, v in s.execute(select(Session.status, func.count()).group_by(Session.status))
        }
        claimed = (Session.attempts > 0) & Session.status.in_(("pending", "running"))
        out.unfinished = int(s.scalar(select(func.count()).select_from(Session).where(claimed)) or 0)
        out.retried = int(
            s.scalar(select(func.count()).select_from(Session).where(Session.attempts > 1)) or 0
        )
    return out
