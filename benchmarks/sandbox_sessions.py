"""Where a real-sandbox session's time goes, from a finished harvest's data folder (`make harvest
TARGET=scripted DATA_DIR=…`): the scripted brain answers at once, so what is left is the host's own cost.

    python benchmarks/sandbox_sessions.py DATA_DIR [--cores N] [--wall-s S] [--json OUT]

Per session, from the queue (start, end) and the proxy's call records (each call's start and end):
before the first call (container, environment, baseline tests, the CLI's start-up), the calls themselves
(waiting on the target), between calls (the CLI's own work and its tools in the sandbox), after the last
call (patch, the tests after it, teardown). With --wall-s (the harvest's wall time) and --cores, the
sessions per hour per core the host sustained."""

from __future__ import annotations

import argparse
import itertools
import json
import sqlite3
import statistics
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pyarrow.dataset as ds


def _ts(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value)).timestamp()


def _ci(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.1f}" if values else "n/a"
    m, sd = statistics.mean(values), statistics.stdev(values)
    half = 1.96 * sd / len(values) ** 0.5
    return f"{m:.1f} [{m - half:.1f}, {m + half:.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--wall-s", type=float, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    db = sqlite3.connect(args.data_dir / "factory.db")
    rows = db.execute(
        "SELECT proxy_session_id, agent, lang, started_at, finished_at, exit_status, error FROM sessions "
        "WHERE status = 'done'"
    ).fetchall()
    calls: dict[str, list[tuple[float, float]]] = defaultdict(list)
    table = ds.dataset(args.data_dir / "calls").to_table(
        columns=["session_id", "started_at", "finished_at", "tag"]
    )
    for sid, start, end, _tag in zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True):
        if sid and start and end:
            calls[sid].append((_ts(start), _ts(end)))
    out = []
    for psid, agent, lang, start, end, exit_status, error in rows:
        own = sorted(calls.get(psid, []))
        if not own:
            continue
        t0, t1 = _ts(start), _ts(end)
        in_calls = sum(e - s for s, e in own)
        between = sum(max(0.0, b[0] - a[1]) for a, b in itertools.pairwise(own))
        out.append(
            {
                "agent": agent,
                "lang": lang,
                "turns": len(own),
                "wall_s": round(t1 - t0, 2),
                "before_first_call_s": round(own[0][0] - t0, 2),
                "in_calls_s": round(in_calls, 2),
                "between_calls_s": round(between, 2),
                "after_last_call_s": round(t1 - own[-1][1], 2),
                "exit_status": exit_status,
                "error": error,
            }
        )
    by_agent: dict[str, list[dict[str, object]]] = defaultdict(list)
    for s in out:
        by_agent[str(s["agent"])].append(s)
    print(f"{len(out)} sessions; mean [95 % CI]")
    print(
        "| agent | sessions | turns (min–max) | wall s | before 1st call s | in calls s | between calls s | after last s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for agent, ss in sorted(by_agent.items()):
        turns = [int(s["turns"]) for s in ss]  # type: ignore[call-overload]
        cols = [
            _ci([float(s[k]) for s in ss])
            for k in ("wall_s", "before_first_call_s", "in_calls_s", "between_calls_s", "after_last_call_s")
        ]  # type: ignore[arg-type]
        print(
            f"| {agent} | {len(ss)} | {statistics.mean(turns):.1f} ({min(turns)}–{max(turns)}) | "
            + " | ".join(cols)
            + " |"
        )
    summary: dict[str, object] = {"sessions": out}
    if args.wall_s:
        per_core = len(out) / (args.wall_s / 3600) / args.cores
        summary["sessions_per_hour_per_core"] = round(per_core, 2)
        print(
            f"{len(out)} sessions in {args.wall_s:.0f} s on {args.cores} cores: {per_core:.1f} sessions/hour/core"
        )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
