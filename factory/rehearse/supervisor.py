"""`python -m factory rehearse`: plan the campaign, keep a driver running (restarting it when a fault killed
it), inject the faults as the sessions end, sample memory and CPU of every part, then roll, export and
report (factory/rehearse/report.py)."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import connect, default_url, session_factory
from factory.publish.export import export
from factory.rehearse import accounting, faults, probe
from factory.rehearse.campaign import plan_campaign
from factory.rehearse.driver import ended
from factory.rehearse.options import RehearseOptions
from factory.run import queue
from proxy.roller import roll_data_dir

Say = Callable[[str], None]


@dataclass
class Samples:
    """Peak memory and CPU seconds of each part, sampled every few seconds."""

    peak_rss: dict[str, int] = field(default_factory=dict)  # kind → the peak of its processes' summed RSS
    cpu_s: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid → (kind, CPU seconds so far)
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (seconds, sessions ended)

    def take(self, driver: int) -> None:
        rss: dict[str, int] = {}
        procs = [psutil.Process(driver), *faults.tree(driver)]
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process())
        for p in procs:
            kind = "driver" if p.pid == driver else faults.kind_of(p) or "other"
            kind = "supervisor" if p.pid == psutil.Process().pid else kind
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                rss[kind] = rss.get(kind, 0) + p.memory_info().rss
                t = p.cpu_times()
                self.cpu_s[p.pid] = (kind, t.user + t.system)
        for kind, v in rss.items():
            self.peak_rss[kind] = max(self.peak_rss.get(kind, 0), v)

    def cpu_by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, s in self.cpu_s.values():
            out[kind] = round(out.get(kind, 0.0) + s, 1)
        return out


def _driver(opts: RehearseOptions) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "factory.rehearse.driver", opts.model_dump_json()]
    with (opts.data_dir / "logs" / "driver.log").open("ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def run(opts: RehearseOptions, say: Say) -> dict[str, Any]:
    report: dict[str, Any] = {"options": opts.model_dump(mode="json")}
    mounted = faults.mount_limit(opts)
    if mounted:
        say(f"disk {mounted}")
    (opts.data_dir / "logs").mkdir(parents=True, exist_ok=True)
    opts.report_dir.mkdir(parents=True, exist_ok=True)
    db = opts.db or default_url(opts.data_dir)
    sessions = session_factory(connect(db))
    planned = plan_campaign(sessions, opts, opts.data_dir, seed=opts.seed)
    say(
        f"plan {planned.sessions:,} sessions added ({planned.issues:,} issues, {planned.translations:,} in "
        f"Korean, {planned.repos} repositories) in {planned.seconds:.1f} s: {planned.rows_per_s:,.0f} rows/s"
    )
    report["plan"] = {**planned.__dict__, "rows_per_s": round(planned.rows_per_s)}
    report["run"] = _sessions(opts, sessions, say)
    if opts.queue_probe_s:  # after the run: a PostgreSQL copy needs the database idle
        engine = sessions.kw["bind"]
        report["queue_probe"] = probe.claims_per_s(
            db, opts.runners * opts.workers, opts.queue_probe_s, engine
        )
        say(f"queue alone (a copy of it, no work): {report['queue_probe']}")
    t0 = time.monotonic()
    say(f"roll {roll_data_dir(opts.data_dir)}")
    report["roll_s"] = round(time.monotonic() - t0, 2)
    t0 = time.monotonic()
    es = export(
        sessions, opts.data_dir, opts.data_dir / "dataset", rehearsal=True, held_out=0.05, progress=say
    )
    report["export"] = {
        "seconds": round(time.monotonic() - t0, 2),
        "calls": es.calls,
        "sessions": es.sessions,
        "sequences": es.sequences,
        "supervised_tokens": es.supervised_tokens,
        "stale_attempt_calls_skipped": es.stale_attempt_calls_skipped,
    }
    killed = frozenset(f["pid"] for f in report["run"]["faults"] if f["fault"] == "runner" and f["pid"])
    report["ledger"] = accounting.count(opts.data_dir, opts.report_dir, sessions, killed).as_dict()
    report["disk_bytes"] = {
        name: _du(opts.data_dir / name) for name in ("calls", "spool", "transcripts", "dataset", "factory.db")
    }
    return report


def _sessions(opts: RehearseOptions, sessions: sessionmaker[OrmSession], say: Say) -> dict[str, object]:
    """Keep a driver running until `opts.sessions` sessions ended; faults at even steps of the progress."""
    rng = random.Random(opts.seed)
    base = ended(queue.counts(sessions))
    goal = max(0, opts.sessions - base)
    due = [(base + goal * (i + 1) / (len(opts.fault) + 1), kind) for i, kind in enumerate(opts.fault)]
    samples, events, drivers = Samples(), [], 0
    t0 = time.monotonic()
    driver = _driver(opts)
    drivers += 1
    last_line = 0.0
    while True:
        code = driver.poll()
        try:
            now_ended = ended(queue.counts(sessions))
        except OperationalError:  # the database restarting (a fault): ask again
            time.sleep(1.0)
            continue
        if code is not None:
            if code == 0 and now_ended >= opts.sessions:
                break
            say(f"driver exited ({code}); starting another (it reaps what the last one left)")
            driver, drivers = _driver(opts), drivers + 1
        with contextlib.suppress(psutil.NoSuchProcess):
            samples.take(driver.pid)
        elapsed = time.monotonic() - t0
        samples.timeline.append((round(elapsed, 1), now_ended))
        while due and now_ended >= due[0][0]:
            _, kind = due.pop(0)
            line, pid = faults.inject(kind, driver, opts, rng)
            events.append(
                {"t": round(elapsed, 1), "ended": now_ended, "fault": kind, "what": line, "pid": pid}
            )
            say(f"fault at {elapsed:.0f} s ({now_ended} sessions ended): {line}")
        if elapsed - last_line >= 10:
            say(f"sessions ended {now_ended:,}/{opts.sessions:,} after {elapsed:.0f} s")
            last_line = elapsed
        time.sleep(1.0)
    wall = time.monotonic() - t0
    return {
        "seconds": round(wall, 1),
        "drivers_started": drivers,
        "faults": events,
        "faults_not_reached": [k for _, k in due],
        "peak_rss_bytes": samples.peak_rss,
        "cpu_seconds": samples.cpu_by_kind(),
        "timeline": samples.timeline,
    }
