"""A killed harvest leaves nothing running, and the next one starts from a clean slate with every recorded
call kept: `kill -9` of the harvest's whole process group, or of the runner alone, while a session is in
flight (scripted sessions making real calls through the real proxy; the upstream is the scripted model,
as no GPU target can run here), then a restart on the same data folder. A second live harvest on that
folder is refused; one on another folder is left alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from clikit.children import free_port
from factory.db import Session, connect, default_url, session_factory

from .reaping import all_gone, finish, harvest, kill9, ledger, processes, records_written, wait_for

ROOT = Path(__file__).resolve().parents[2]


def start(data: Path, scripted_upstream: str, sleep_s: float, log: Path) -> tuple[subprocess.Popen[str], str]:
    """A harvest of one scripted session (2 calls, then `sleep_s`); returns it once the session is in
    flight with its calls durable in the proxy's spool."""
    port = free_port()
    env = {"DFLASH_FAKE_RUNNER_SLEEP_S": str(sleep_s), "DFLASH_FAKE_RUNNER_LOG_PATH": str(log)}
    p = harvest(
        data, "--target-url", scripted_upstream, "--runner", "fake", "--proxy-port", str(port), env=env
    )
    proxy = f"http://127.0.0.1:{port}"
    wait_for("the session's two calls", lambda: p.poll() is not None or records_written(proxy) >= 2)
    assert p.poll() is None, p.communicate()
    return p, proxy


@pytest.mark.slow
@pytest.mark.parametrize("group", [True, False], ids=["kill-group", "kill-runner"])
def test_killed_harvest_is_reaped_and_its_session_completes_once(tmp_path, scripted_upstream, group):
    data, log = tmp_path / "data", tmp_path / "sessions.jsonl"
    first, _proxy = start(data, scripted_upstream, 120, log)
    first_run = ledger(data)
    assert first_run is not None
    services = processes(first_run)
    assert [s.name for s in services] == ["proxy"]

    kill9(first, group)
    # The proxy leads a process group of its own (a Ctrl-C reaches the runner first), so a kill of the
    # harvest's group misses it: the parent-death signal ends it.
    wait_for("the first run's proxy to end", lambda: all_gone(services), timeout_s=30)

    summary = finish(
        harvest(
            data,
            "--target-url",
            scripted_upstream,
            "--runner",
            "fake",
            env={"DFLASH_FAKE_RUNNER_LOG_PATH": str(log)},
        )
    )
    assert summary["run"] == {"done": 1, "agent_failed": 0, "infra_failed": 0, "retries": 0}
    events = [line for line in log.read_text().splitlines()]
    assert sum('"start"' in e for e in events) == 2  # attempt 1 (killed) and attempt 2
    assert sum('"finish"' in e for e in events) == 1  # completed exactly once
    with session_factory(connect(default_url(data)))() as s:
        done = s.scalars(select(Session).where(Session.status == "done")).all()
    assert [(row.attempts, row.proxy_session_id.endswith("-a2")) for row in done] == [(1 + 1, True)]
    # The first run's calls were rolled into Parquet, then left out of the export as a dropped attempt.
    export = summary["export"]
    assert export["calls"] == 2
    assert export["stale_attempt_calls_skipped"] == 2
    assert not list((data / "spool").glob("*.spool"))
    assert not list((data / "runs").glob("*.json"))  # both ledgers closed: nothing left to reap
    assert all_gone(services)


@pytest.mark.slow
def test_second_harvest_on_a_folder_is_refused_another_folder_is_left_alone(tmp_path, scripted_upstream):
    a, b = tmp_path / "a", tmp_path / "b"
    first, _ = start(a, scripted_upstream, 120, tmp_path / "a.jsonl")
    other, other_proxy = start(b, scripted_upstream, 120, tmp_path / "b.jsonl")
    other_services = processes(ledger(b))  # type: ignore[arg-type]
    try:
        dup = harvest(a, "--target-url", scripted_upstream, "--runner", "fake")
        _out, err = dup.communicate(timeout=120)
        assert dup.returncode == 3
        assert f"{a} is in use by a live run (pid {first.pid}" in " ".join(err.split())

        kill9(first, group=True)
        assert finish(harvest(a, "--target-url", scripted_upstream, "--runner", "fake"))["run"]["done"] == 1
        # The restart reaped folder a's dead run; b's run, alive, still runs with its proxy and ledger.
        assert other.poll() is None
        assert not all_gone(other_services)
        assert records_written(other_proxy) >= 2
        assert ledger(b) is not None
    finally:
        for p in (first, other):
            if p.poll() is None:
                kill9(p, group=True)
