"""The rehearsal end to end: the rehearsal agent speaking each CLI's API through the real proxy to the real
scripted brain, and `python -m factory rehearse` with kill -9 faults — its report, its dataset (marked, and
refused by the trainer), and what a plain export does with the brain's calls (no training sequences)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from factory.harvest import HarvestOptions, run_harvest
from factory.ingest import sample
from factory.run.rehearsal_dialects import DIALECTS
from factory.run.rehearsal_runner import RehearsalAgentSettings, RehearsalSessionRunner
from factory.run.runner_types import REHEARSAL, SessionSpec
from factory.run.tasks import build_task
from proxy.errors import stream_error_event
from records.agents import AgentName
from records.io import read_table
from records.tags import REHEARSAL_TAG
from tests.proxy.live import proxy_server
from tests.support import REPO_ROOT, background, free_port
from trainer.data.published import published_sequences
from trainer.errors import TrainerError


def _spec(repo: Path, commit: str, agent: AgentName, proxy: str, i: int) -> SessionSpec:
    lang = "ko" if agent == AgentName.CODEX else "en"
    task = build_task(
        lang=lang,
        repo="dflash-sample/textkit",
        language="Python",
        setup_hint=None,
        number=i,
        title="wrap() drops the last word",
        body="wrap('a b c', 3) loses 'c'.",
        test_command="python3 -m unittest discover -s tests",
    )
    return SessionSpec(f"s{i}", f"p{i}", 1, agent, lang, "dflash-sample/textkit", repo, commit, task, proxy)


def test_every_agent_api_drives_a_real_session_through_the_proxy(tmp_path: Path) -> None:
    textkit = next(s for s in sample.load() if s.name.endswith("textkit"))
    repo = sample.materialize(textkit, tmp_path / "repos")
    commit = sample.base_commit(repo, "2030-01-01T00:00:00Z")
    port = free_port()
    brain = ["-m", "rehearsal", "serve", "--port", str(port), "--latency-scale", "0", "--turns-min", "7"]
    with (
        background([*brain, "--turns-max", "9"], f"http://127.0.0.1:{port}/health"),
        proxy_server(f"http://127.0.0.1:{port}", tmp_path / "data", "--upstream-api", "chat") as proxy,
    ):
        agent = RehearsalSessionRunner("scripted-brain", RehearsalAgentSettings(ack_log=tmp_path / "acks"))
        outcomes = {a: agent.run(_spec(repo, commit, a, proxy.url, i)) for i, a in enumerate(AgentName)}
        rows = proxy.rows()
    lines = [
        json.loads(line) for f in (tmp_path / "acks").glob("*.jsonl") for line in f.read_text().splitlines()
    ]
    acked = Counter(rec["session"] for rec in lines if "finished" not in rec)
    recorded = Counter(r["session_id"] for r in rows if r["status_code"] == 200)
    assert acked == recorded
    assert sum(acked.values()) == len(rows)
    assert {r["api"] for r in rows} == {"anthropic_messages", "openai_responses", "openai_chat"}
    assert {r["tag"] for r in rows} == {REHEARSAL_TAG}
    assert {r["agent"] for r in rows} == {a.value for a in AgentName}
    for agent_name, out in outcomes.items():
        tools = [e for e in out.transcript if e["type"] == "tool"]
        assert out.exit_status == 0, agent_name
        assert 6 <= len(tools) <= 8, agent_name  # 7–9 turns: every one but the last ran a command
        assert "textkit" in tools[0]["output"]  # the listing ran in the checkout
        assert "rehearsal: checked" in out.patch  # the edit really changed a file
    ko = json.loads(next(r["request_json"] for r in rows if r["agent"] == "codex"))
    assert "저장소" in json.dumps(ko, ensure_ascii=False)


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
    assert ledger["acknowledged"] == ledger["recorded_ok"] > 12 * 4
    assert report["queue_probe"]["claims_per_s"] > 0
    assert report["export"]["sequences"] > 0
    assert (data / "report" / "report.png").stat().st_size > 0
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
