"""Each real agent CLI in a real confined container, through the real proxy, against the scripted upstream.

The upstream is scripted because the real target (a GPU vLLM) cannot run here: it answers with one shell
tool call creating AGENT_PROOF.txt, then text.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from sandboxes.agents import AGENTS
from sandboxes.config import SandboxSettings
from sandboxes.session import run_session
from tests.fakes.scripted_policy import PROOF_FILE
from tests.sandboxes.conftest import leftovers
from tests.sandboxes.sessions import NOTHING_LEFT, TASKS, check_failed, check_result, scripted_request
from tests.support import REPO_ROOT, background, free_port

pytestmark = [pytest.mark.docker, pytest.mark.cli, pytest.mark.slow]


@pytest.fixture
def proxy(upstream_url: str, tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """A proxy of this test's own, so that stopping it releases its spool segment for the roll."""
    port, data = free_port(), tmp_path / "proxy-data"
    url = f"http://127.0.0.1:{port}"
    args = ["-m", "proxy", "serve", "--upstream", upstream_url, "--port", str(port), "--data-dir", str(data)]
    with background(args, f"{url}/healthz") as proc:
        yield url, data, proc


def recorded(data: Path, session_id: str) -> list[dict[str, object]]:
    """Calls the proxy recorded under `session_id`, read from its Parquet parts after a roll."""
    subprocess.run(
        [sys.executable, "-m", "proxy", "roll", "--data-dir", str(data)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    table = ds.dataset(data / "calls", format="parquet").to_table(
        columns=["session_id", "agent_session_id", "path", "status_code"]
    )
    return [row for row in table.to_pylist() if row["session_id"] == session_id]


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_agent_in_a_sandbox_through_the_proxy(  # type: ignore[no-untyped-def]
    agent: str, docker_client, agents_image, proxy, repo, run_id
) -> None:
    url, data, proc = proxy
    session = f"sess-{agent}-{run_id}"
    language = "ko" if agent == "opencode" else "en"
    req = scripted_request(
        agent,
        repo,
        url,
        agents_image,
        task=TASKS[language],
        session_id=session,
        run_id=run_id,
        time_limit_s=240,
    )
    result = run_session(req, docker_client)
    check_result(result)
    assert leftovers(docker_client, run_id) == NOTHING_LEFT
    proc.terminate()  # closes its spool segment; `background` sees it gone
    proc.wait(timeout=20)
    calls = recorded(data, session)
    assert len(calls) >= 2, "at least the tool-call turn and the turn after the tool result"
    assert all(c["status_code"] == 200 for c in calls), calls
    assert result.agent_session_id in {c["agent_session_id"] for c in calls}, (result.agent_session_id, calls)


def test_try_cli_prints_the_result_as_json(agents_image, proxy, repo, run_id) -> None:  # type: ignore[no-untyped-def]
    (url, _, _), (path, base) = proxy, repo
    cmd = [
        sys.executable,
        "-m",
        "sandboxes",
        "try",
        "--agent",
        "codex",
        "--repo",
        str(path),
        "--commit",
        base,
        "--task",
        TASKS["en"],
        "--proxy",
        url,
        "--session",
        f"cli-{run_id}",
        "--run",
        run_id,
        "--model",
        "scripted",
        "--image",
        agents_image,
        "--compact",
    ]
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["session_id"] == f"cli-{run_id}"
    assert result["agent"] == "codex"
    assert result["status"] == "succeeded"
    assert PROOF_FILE in result["patch"]


def test_agent_overrunning_its_time_limit_fails_with_the_reason(  # type: ignore[no-untyped-def]
    docker_client, agents_image, proxy_server, repo, run_id
) -> None:
    """The scripted model `slow-60000` waits a minute per chunk; the agent may run 10 s."""
    req = scripted_request(
        "codex", repo, proxy_server[0], agents_image, run_id=run_id, model="slow-60000", time_limit_s=10
    )
    result = run_session(req, docker_client)
    check_failed(result, "timeout", docker_client, run_id)
    assert 9 <= result.timings["agent"] < 20


def test_agent_out_of_memory_fails_with_the_reason(  # type: ignore[no-untyped-def]
    docker_client, agents_image, proxy_server, repo, run_id
) -> None:
    settings = SandboxSettings(memory="32m")
    req = scripted_request(
        "claude-code", repo, proxy_server[0], agents_image, run_id=run_id, time_limit_s=120, settings=settings
    )
    check_failed(run_session(req, docker_client), "oom", docker_client, run_id)
