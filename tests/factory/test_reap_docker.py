"""The same kill-and-restart with real sandboxes: a harvest whose session runs in a confined Docker
sandbox (a short command in place of an agent: it makes one real call through the proxy, then waits) is
killed with `kill -9` while the session is in flight. Its watcher removes the dead run's container,
network and firewall rules at once; when the watcher dies too, the restart on the same data folder does.
Either way the session completes once and the dead attempt's call is rolled from the spool (dropped from
the export as a stale attempt)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from clikit.children import free_port
from factory.db import Session, connect, default_url, session_factory

from .reaping import (
    all_gone,
    finish,
    harvest,
    kill9,
    kill_watcher,
    ledger,
    processes,
    records_written,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
CALL = (
    "python3 -c \"import json,os,urllib.request as u; u.urlopen(u.Request(os.environ['DFLASH_PROXY_URL']"
    "+'/s/{session}/v1/chat/completions', data=json.dumps({'model': 'target', 'messages': [{'role': 'user', "
    "'content': 'hi'}], 'max_tokens': 4}).encode(), headers={'content-type': 'application/json'})).read()\""
)


def firewall_rules() -> str:
    return subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True, text=True).stdout


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("group", [True, False], ids=["kill-group", "kill-runner-and-watcher"])
def test_killed_harvest_leaves_no_sandbox_behind(
    tmp_path, docker_client, agents_image, scripted_upstream, group
):
    data, port = tmp_path / "data", free_port()
    common = ("--target-url", scripted_upstream, "--runner", "sandbox", "--image", agents_image)
    first = harvest(data, *common, "--proxy-port", str(port), "--sandbox-command", f"{CALL}; sleep 300")
    wait_for("the first run's ledger", lambda: ledger(data), timeout_s=60)
    run_id = str(ledger(data)["run_id"])  # type: ignore[index]
    label = {"label": f"dflash.sandbox.run={run_id}"}
    wait_for(
        "the sandbox's call", lambda: first.poll() is not None or records_written(f"http://127.0.0.1:{port}")
    )
    assert first.poll() is None, first.communicate()
    containers = docker_client.containers.list(all=True, filters=label)
    networks = [n.name for n in docker_client.networks.list(filters=label)]
    assert len(containers) == 1
    assert len(networks) == 1
    assert networks[0] in firewall_rules()
    services = processes(ledger(data))  # type: ignore[arg-type]

    if group:
        kill9(first, group)
        # The run's watcher outlives it only to reap it: the sandbox goes without waiting for a restart.
        wait_for("the watcher's reap", lambda: not docker_client.containers.list(all=True, filters=label), 60)
        log = data / "logs" / "reaper.log"
        wait_for("the watcher's report", lambda: f"removed network {networks[0]}" in log.read_text(), 30)
        assert f"removed container {containers[0].name}" in log.read_text()
    else:
        kill_watcher(run_id)  # everything of the run dies (watcher first): only the restart's reap is left
        kill9(first, group)
        assert docker_client.containers.list(all=True, filters=label)

    summary = finish(harvest(data, *common, "--sandbox-command", "true"))
    assert summary["run"]["done"] == 1
    assert docker_client.containers.list(all=True, filters=label) == []
    assert docker_client.networks.list(filters=label) == []
    assert networks[0] not in firewall_rules()
    assert all_gone(services)
    with session_factory(connect(default_url(data)))() as s:
        rows = s.scalars(select(Session).where(Session.status != "pending")).all()
    assert [(r.status, r.attempts) for r in rows] == [("done", 2)]
    assert summary["export"]["stale_attempt_calls_skipped"] == 1  # the dead attempt's call, rolled, kept out
    assert not list((data / "spool").glob("*.spool"))
