"""The rehearsal end to end: `python -m factory rehearse` with kill -9 faults — the rehearsal agent speaking
each CLI's API through the real proxies to the real scripted brain, the report, the dataset (marked, and
refused by the trainer), what a plain export does with the brain's calls (no training sequences) — and a
harvest with the brain as its target."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from factory.harvest import HarvestOptions, run_harvest
from factory.run.rehearsal_dialects import DIALECTS
from factory.run.runner_types import REHEARSAL
from proxy.errors import stream_error_event
from records.agents import AgentName
from records.io import read_table
from records.tags import REHEARSAL_TAG
from tests.support import REPO_ROOT
from trainer.data.published import published_sequences
from trainer.errors import TrainerError


def test_a_harvest_with_the_scripted_brain_runs_long_sessions_and_publishes_a_rehearsal(
    tmp_path: Path,
) -> None:
    """`harvest --target-engine scripted`: the brain started as the target, every session of 10 turns or more,
    every call tagged, the export marked a rehearsal (the sandboxes are the rehearsal agent here: the real CLIs
    in Docker are measured in docs/BENCHMARKS.md)."""
    opts = HarvestOptions(
        data_dir=tmp_path / "data",
        target_engine="scripted",
        target_arg=["--latency-scale", "0", "--turns-max", "12"],
        runner=REHEARSAL,
        limit=3,
        held_out=0.0,
        translate_limit=0,
    )
    with (tmp_path / "console.txt").open("w") as fh:
        summary = run_harvest(opts, Console(file=fh, width=200))
    assert summary["target_model"] == "scripted-brain"
    rows = read_table(tmp_path / "data" / "dataset").to_pylist()
    per_session = Counter(r["session_id"] for r in rows)
    assert len(per_session) == 3
    assert min(per_session.values()) >= 10
    recorded = read_table(tmp_path / "data" / "calls", columns=["tag"]).column("tag").to_pylist()
    assert set(recorded) == {REHEARSAL_TAG}  # the proxy's records; the dataset is marked as a whole
    stats = json.loads((tmp_path / "data" / "dataset" / "stats.json").read_text())
    assert stats["settings"]["rehearsal"] is True
    assert stats["sequences"] > 0


@pytest.mark.parametrize("agent", list(AgentName))
def test_a_stream_ending_in_an_error_event_is_not_an_answer(agent: AgentName) -> None:
    """The proxy ends a stream it could not record with the API's error event: the agent must retry, as a CLI's
    SDK raises on it, or a rehearsal would count an unrecorded call as acknowledged."""
    dialect = DIALECTS[agent]("m", "task")
    assert dialect.assemble(stream_error_event(dialect.api.value, "could not record; retry")) is None


@pytest.mark.slow
def test_rehearse_survives_kills_and_reports(tmp_path: Path) -> None:
    data = tmp_path / "r"
    argv = [sys.executable, "-m", "factory", "rehearse", "--data-dir", str(data), "--repos", "12"]
    argv += ["--issues", "40", "--translated", "30", "--sessions", "12", "--runners", "2", "--workers", "3"]
    argv += ["--latency-scale", "0", "--turns-median", "6", "--queue-probe-s", "1"]
    argv += ["--fault", "proxy", "--fault", "runner", "--fault", "driver"]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((data / "report" / "report.json").read_text())
    assert report["plan"]["sessions"] == 40 * 3 + 30 * 3
    assert [f["what"].split(" pid")[0] for f in report["run"]["faults"]] == [
        "kill -9 proxy",
        "kill -9 runner",
        "kill -9 driver",
    ]
    assert report["run"]["drivers_started"] == 2
    assert report["derived"]["verdict"] == {
        "acknowledged_calls_lost": 0,
        "sessions_completed_twice": 0,
        "sessions_unfinished": 0,
    }
    ledger = report["ledger"]
    assert ledger["sessions_finished"] >= 12
    assert ledger["acknowledged"] > 12 * 4
    # A call the proxy recorded may never be acknowledged: its agent was killed -9 (with its runner, or its
    # proxy cut the answer) after the fsync and before the answer arrived. Every recorded call is either
    # acknowledged or one of those, and only calls in flight at a kill can be: 3 faults, each catching at
    # most every worker of both runners (2 x 3) mid-call.
    assert ledger["acknowledged"] + ledger["unacknowledged_recorded"] == ledger["recorded_ok"]
    assert ledger["unacknowledged_recorded"] <= 3 * 2 * 3
    # a session whose end died with its runner (kill -9 before it was stored) ran again: at most the killed
    # runner's three workers; the driver's kill reaches its runners as SIGTERM, and they store what ended
    assert ledger["redone_after_kill"] <= 3
    assert report["queue_probe"]["claims_per_s"] > 0
    assert report["export"]["sequences"] > 0
    assert (data / "report" / "report.png").stat().st_size > 0
    # the rehearsal agent spoke each CLI's API, the proxy tagged every call, the brain's edits landed
    calls = read_table(data / "calls", columns=["api", "tag", "agent"]).to_pylist()
    assert {c["api"] for c in calls} == {"anthropic_messages", "openai_responses", "openai_chat"}
    assert {c["tag"] for c in calls} == {REHEARSAL_TAG}
    assert {c["agent"] for c in calls} == {a.value for a in AgentName}
    with sqlite3.connect(data / "factory.db") as db:
        patches = [p for (p,) in db.execute("SELECT patch FROM sessions WHERE status = 'done'")]
    assert sum("rehearsal: checked" in (p or "") for p in patches) >= len(patches) // 2
    stats = json.loads((data / "dataset" / "stats.json").read_text())
    assert stats["settings"]["rehearsal"] is True
    assert "REHEARSAL" in (data / "dataset" / "README.md").read_text()
    with pytest.raises(TrainerError, match="rehearsal"):
        published_sequences(None, data / "dataset" / "data" / "sequences")  # type: ignore[arg-type]
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "factory",
            "export",
            "--data-dir",
            str(data),
            "--out",
            str(tmp_path / "plain"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plain.returncode == 0, plain.stderr[-2000:]
    plain_stats = json.loads((tmp_path / "plain" / "stats.json").read_text())
    assert plain_stats["sequences"] == 0
    assert plain_stats["calls"] == report["export"]["calls"]
