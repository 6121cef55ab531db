"""Progress off a terminal is one plain line per finished session; on one it is the live table. Runners
are chosen by name, and `factory status` names sessions leased by dead runners."""

from __future__ import annotations

import io
import json
import socket
import subprocess
from typing import get_args

import pytest
from rich.console import Console
from sqlalchemy import select, update
from typer.testing import CliRunner

from factory.cli import app
from factory.db import Session, connect, default_url, session_factory
from factory.run.fake_runner import FakeSessionRunner
from factory.run.plan import PlanConfig, plan
from factory.run.progress import Progress
from factory.run.runner import RunConfig, Runner
from factory.run.runner_types import RunnerArgs
from factory.run.runners import RUNNERS, RunnerName, get_runner, uses_sandboxes
from sandboxes.labels import process_start_time

from .helpers import seed


def run_with_progress(tmp_path, console: Console, plain: bool | None) -> tuple[Runner, Progress]:
    sessions = session_factory(connect(default_url(tmp_path / "data")))
    seed(sessions, tmp_path / "repo", repos=1, issues=2)  # 2 issues × 2 languages × 3 agents
    plan(sessions, PlanConfig(seed=0))
    cfg = RunConfig(
        proxy_url="http://127.0.0.1:9", data_dir=tmp_path / "data", concurrency=2, limit=5, poll_s=0.05
    )
    runner = Runner(sessions, FakeSessionRunner(), cfg)
    progress = Progress(console, plain=plain)
    with progress.live():
        runner.run(on_tick=progress.tick, tick_s=0.05)
    progress.final(runner)
    return runner, progress


def test_off_a_terminal_one_plain_line_per_finished_session(tmp_path):
    out = io.StringIO()
    _runner, progress = run_with_progress(tmp_path, Console(file=out, width=80), plain=None)
    assert progress.plain  # a file is not a terminal
    lines = out.getvalue().splitlines()
    finished = [line for line in lines if line.startswith("session ")]
    assert len(finished) == 5
    assert all("attempt 1: done (exit 0)" in line for line in finished)
    assert len({line.split()[1] for line in finished}) == 5  # five different sessions
    assert finished[-1].endswith("/h")
    assert "done 5," in finished[-1]
    assert lines[-1] == "sessions: 5 done (0 agent-failed), 0 retried, 0 failed by infrastructure"
    assert not any(ch in out.getvalue() for ch in "│━─")  # no table drawing


def test_on_a_terminal_the_live_table(tmp_path):
    out = io.StringIO()
    run_with_progress(tmp_path, Console(file=out, width=120, force_terminal=True), plain=False)
    text = out.getvalue()
    assert "dflash factory · sessions" in text
    assert "5 done, 0 agent-failed" in text
    assert "session " not in text.replace("dflash factory · sessions", "")


def test_runners_by_name(monkeypatch, tmp_path):
    assert set(RUNNERS) == {"sandbox", "fake", "rehearsal-agent"} == set(get_args(RunnerName))
    assert uses_sandboxes("sandbox")
    assert not uses_sandboxes("fake")
    monkeypatch.setenv("DFLASH_FAKE_RUNNER_SLEEP_S", "1.5")
    monkeypatch.setenv("DFLASH_FAKE_RUNNER_LOG_PATH", str(tmp_path / "log"))
    fake = get_runner("fake", RunnerArgs(model="m"))
    assert isinstance(fake, FakeSessionRunner)
    assert (fake.sleep_s, fake.model, fake.log_path, fake.calls) == (1.5, "m", tmp_path / "log", 2)
    with pytest.raises(
        ValueError, match="unknown runner 'docker'; choose one of sandbox, fake, rehearsal-agent"
    ):
        get_runner("docker", RunnerArgs())


def test_harvest_options_errors_name_the_option(tmp_path):
    cli = CliRunner()
    r = cli.invoke(app, ["harvest", "--data-dir", str(tmp_path), "--agents", "cursor"])
    assert r.exit_code == 2
    assert "--agents (from command line)" in r.output
    assert "unknown 'cursor'" in r.output
    r = cli.invoke(app, ["harvest", "--data-dir", str(tmp_path), "--runner", "k8s"])
    assert r.exit_code == 2
    assert "--runner" in r.output
    assert "'sandbox', 'fake' or 'rehearsal-agent'" in r.output
    assert not (tmp_path / "runs").exists()  # refused before anything started


def test_status_names_sessions_leased_by_dead_runners(tmp_path):
    data = tmp_path / "data"
    sessions = session_factory(connect(default_url(data)))
    seed(sessions, tmp_path / "repo", repos=1, issues=1)
    plan(sessions, PlanConfig(seed=0))
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs
    alive = subprocess.Popen(["sleep", "60"])
    host = socket.gethostname()
    owners = [
        f"{host}:{gone.pid}:w0",  # written before start times were recorded: judged by pid
        f"{host}:{alive.pid}@0:w0",  # a live pid, but not the process that took the lease (reused pid)
        f"{host}:{alive.pid}@{process_start_time(alive.pid)}:w0",  # alive
        f"elsewhere:{gone.pid}:w0",  # another host's: not ours to judge
    ]
    try:
        with sessions.begin() as s:
            ids = s.scalars(select(Session.id).order_by(Session.id).limit(len(owners))).all()
            for sid, owner in zip(ids, owners, strict=True):
                s.execute(
                    update(Session).where(Session.id == sid).values(status="running", lease_owner=owner)
                )
        r = CliRunner().invoke(app, ["status", "--data-dir", str(data)])
    finally:
        alive.kill()
        alive.wait()
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert sorted(out["dead_leases"], key=lambda d: d["owner"]) == sorted(
        [{"session": ids[0], "owner": owners[0]}, {"session": ids[1], "owner": owners[1]}],
        key=lambda d: d["owner"],
    )
    assert out["reap"] == []  # no dead run recorded anything in this folder


def test_run_command_options_come_from_the_run_config(tmp_path, monkeypatch):
    data = tmp_path / "data"
    sessions = session_factory(connect(default_url(data)))
    seed(sessions, tmp_path / "repo", repos=1, issues=1)
    plan(sessions, PlanConfig(seed=0))
    monkeypatch.setenv("DFLASH_FAKE_RUNNER_CALLS", "0")  # no proxy in this test
    cli = CliRunner()
    r = cli.invoke(
        app,
        [
            "run",
            "--proxy-url",
            "http://127.0.0.1:9",
            "--data-dir",
            str(data),
            "--runner",
            "fake",
            "--limit",
            "2",
            "--concurrency",
            "1",
            "--lease",
            "30",
            "--backoff",
            "0",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "sessions: 2 done" in r.output
    assert sum("attempt 1: done (exit 0)" in line for line in r.output.splitlines()) == 2
    assert not list((data / "runs").glob("*.json"))  # its ledger closed on a clean end
    r = cli.invoke(app, ["run", "--proxy-url", "x", "--data-dir", str(data), "--lease", "0"])
    assert r.exit_code == 2
    assert "--lease (from command line): Input should be greater than 0" in r.output
