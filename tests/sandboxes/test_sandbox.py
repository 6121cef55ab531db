"""The sandbox's lifecycle: no future history, limits that end runs as failures, teardown and gc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandboxes import labels
from sandboxes.config import SandboxSettings
from sandboxes.gc import collect
from sandboxes.sandbox import Sandbox, SandboxSpec
from sandboxes.session import run_session
from tests.sandboxes.conftest import FUTURE_FILE, leftovers
from tests.sandboxes.sessions import NOTHING_LEFT, check_failed, command_request
from tests.support import REPO_ROOT

pytestmark = pytest.mark.docker


@pytest.fixture
def on_proxy(agents_image: str, proxy_server: tuple[str, Path], run_id: str) -> dict[str, str]:
    """The request fields the command sessions here share: the agents image, the proxy, this test's run."""
    return {"proxy_url": proxy_server[0], "image": agents_image, "run_id": run_id}


def _try(repo: tuple[Path, str], proxy_url: str, image: str, run_id: str) -> subprocess.Popen[bytes]:
    """`python -m sandboxes try` started on a command that runs for minutes."""
    path, base = repo
    args = ["--repo", str(path), "--commit", base, "--proxy", proxy_url, "--image", image, "--run", run_id]
    cmd = [sys.executable, "-m", "sandboxes", "try", *args, "--command", "sleep 300"]
    return subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_running(client, run_id: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Wait (60 s at most) for the run's sandbox to run, then 1 s for it to reach the agent step; the filter
    that finds it running."""
    running = {"label": f"{labels.RUN}={run_id}", "status": "running"}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not client.api.containers(filters=running):
        time.sleep(0.2)
    time.sleep(1.0)
    return running


def test_no_history_after_the_base_commit(docker_client, agents_image, proxy_server, repo, run_id) -> None:  # type: ignore[no-untyped-def]
    path, base = repo
    spec = SandboxSpec(run_id, "hist-1", path, base, proxy_server[0], agents_image, SandboxSettings())
    with Sandbox(spec, docker_client) as box:
        log = box.exec(["git", "log", "--all", "--format=%s"]).stdout.decode().split("\n")
        assert [line for line in log if line] == [f"base {base}"], (
            "one commit, the base, and nothing after it"
        )
        assert box.exec(["test", "-e", FUTURE_FILE]).exit_code != 0, "the future's file is not in the tree"
        objects = box.exec(["sh", "-c", "git rev-list --all --objects | wc -l"]).stdout.decode().strip()
        tree = box.exec(["sh", "-c", "git ls-files | wc -l"]).stdout.decode().strip()
        assert box.exec(["cat", "src/app.py"]).stdout == b"print('hi')\n"
        assert int(objects) == int(tree) + 3, "objects: the files, their two trees and the one commit"
        assert box.exec(["sh", "-c", "test -w . && test -O .git"]).exit_code == 0, (
            "the agent user owns the tree"
        )
        assert box.patch() == b"", "an untouched checkout has an empty patch"
        box.exec(
            ["sh", "-c", "echo new > added.txt && printf '\\000\\001' > blob.bin && echo x >> README.md"]
        )
        patch = box.patch().decode()
        assert "added.txt" in patch
        assert "GIT binary patch" in patch
        assert "README.md" in patch
    assert leftovers(docker_client, run_id) == NOTHING_LEFT


def test_time_limit_overrun_fails_with_its_reason_and_leaves_nothing(  # type: ignore[no-untyped-def]
    docker_client, on_proxy, repo, run_id
) -> None:
    command = "echo started; sleep 60; echo finished"
    result = run_session(command_request(repo, command, time_limit_s=3, **on_proxy), docker_client)
    check_failed(result, "timeout", docker_client, run_id)
    assert result.transcript == [{"raw": "started"}]  # killed at the limit: it never got to "finished"


def test_out_of_memory_fails_with_its_reason_and_leaves_nothing(  # type: ignore[no-untyped-def]
    docker_client, on_proxy, repo, run_id
) -> None:
    settings = SandboxSettings(memory="128m")
    hog = "python3 -c \"b = b'x' * (512 << 20); print(len(b))\""
    req = command_request(repo, hog, time_limit_s=60, settings=settings, **on_proxy)
    check_failed(run_session(req, docker_client), "oom", docker_client, run_id)


def test_setup_failure_tears_down(docker_client, agents_image, proxy_server, repo, run_id) -> None:  # type: ignore[no-untyped-def]
    path, _ = repo
    spec = SandboxSpec(run_id, "bad-1", path, "no-such-rev", proxy_server[0], agents_image, SandboxSettings())
    with pytest.raises(ValueError, match="no-such-rev"), Sandbox(spec, docker_client):
        pass
    assert leftovers(docker_client, run_id) == NOTHING_LEFT


def test_wall_time_watchdog_kills_the_whole_sandbox(
    docker_client, agents_image, proxy_server, repo, run_id
) -> None:  # type: ignore[no-untyped-def]
    path, base = repo
    spec = SandboxSpec(
        run_id, "wall-1", path, base, proxy_server[0], agents_image, SandboxSettings(wall_time_s=4)
    )
    with Sandbox(spec, docker_client) as box:
        # The watchdog is a timer thread: on a loaded machine it may fire late, so wait for it (hang guard).
        deadline = time.monotonic() + 60
        while not box.expired and time.monotonic() < deadline:
            time.sleep(0.1)
        assert box.expired, "hang guard: the 4 s wall-time watchdog had not fired after 60 s"
        res = box.exec(["true"])
        assert res.timed_out
        assert res.exit_code != 0
    assert leftovers(docker_client, run_id) == NOTHING_LEFT


def test_gc_cleans_what_a_killed_run_left(docker_client, agents_image, proxy_server, repo, run_id) -> None:  # type: ignore[no-untyped-def]
    proc = _try(repo, proxy_server[0], agents_image, run_id)
    try:
        running = _wait_running(docker_client, run_id)
        assert docker_client.api.containers(filters=running), proc.stderr.read1().decode()  # type: ignore[union-attr]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    left = leftovers(docker_client, run_id)
    assert left["containers"], "a killed run leaves its sandbox behind"
    assert left["networks"], "a killed run leaves its sandbox behind"
    assert left["rules"], "a killed run leaves its sandbox behind"
    # gc leaves a live run alone...
    assert collect(docker_client, run_id="someone-else").containers == []
    out = subprocess.run(
        [sys.executable, "-m", "sandboxes", "gc", "--run", run_id, "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    report = json.loads(out)
    assert report["containers"] == left["containers"]
    assert report["networks"] == left["networks"]
    assert report["rules"] >= len(left["rules"])
    assert leftovers(docker_client, run_id) == NOTHING_LEFT


def test_sigterm_to_try_still_tears_down(docker_client, agents_image, proxy_server, repo, run_id) -> None:  # type: ignore[no-untyped-def]
    proc = _try(repo, proxy_server[0], agents_image, run_id)
    _wait_running(docker_client, run_id)
    proc.terminate()
    assert proc.wait(timeout=60) == 143
    assert leftovers(docker_client, run_id) == NOTHING_LEFT


def test_gc_spares_a_live_owner(docker_client, agents_image, proxy_server, repo, run_id) -> None:  # type: ignore[no-untyped-def]
    path, base = repo
    spec = SandboxSpec(run_id, "live-1", path, base, proxy_server[0], agents_image, SandboxSettings())
    with Sandbox(spec, docker_client) as box:
        report = collect(docker_client, run_id=run_id)
        assert report.containers == []
        assert report.networks == []
        assert box.container is not None
        box.container.reload()
        assert box.container.status == "running"
        assert box.container.labels[labels.SESSION] == "live-1"
    assert leftovers(docker_client, run_id) == NOTHING_LEFT


def test_concurrent_sessions_share_one_client(docker_client, on_proxy, repo, run_id) -> None:  # type: ignore[no-untyped-def]
    """The factory runs sessions in threads with one Docker client: each gets its own confined sandbox."""
    from concurrent.futures import ThreadPoolExecutor

    script = "echo $DFLASH_PROXY_URL > proof.txt && python3 -c \"import urllib.request as u, os; u.urlopen(os.environ['DFLASH_PROXY_URL'] + '/healthz', timeout=5)\""
    reqs = [command_request(repo, script, session_id=f"conc-{i}", **on_proxy) for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda r: run_session(r, docker_client), reqs))
    assert [r.status for r in results] == ["succeeded"] * 4, [(r.reason, r.stderr) for r in results]
    assert all("+http://" in r.patch for r in results), [(r.session_id, r.patch, r.timings) for r in results]
    urls = {r.patch.split("+http://", 1)[1].split("\n", 1)[0] for r in results}
    assert len(urls) == 4, "each sandbox reaches the proxy through its own network and relay"
    assert leftovers(docker_client, run_id) == NOTHING_LEFT
