"""The three real agent CLIs, headless, through the proxy, against the scripted upstream.

Fake: only the model (the scripted upstream answers one shell tool call, then text). The CLIs, the
proxy and the recording are real.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sandboxes.agents.npm_install import ensure_installed
from tests.fakes.agent_runs import AGENTS, run_agent
from tests.proxy.live import proxy_server, scripted_upstream
from tests.support import REPO_ROOT

pytestmark = [pytest.mark.cli, pytest.mark.slow]


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    return ensure_installed(REPO_ROOT / ".cache" / "agents")


@pytest.mark.parametrize("agent", AGENTS)
def test_real_agent_through_the_proxy_is_recorded(agent: str, binaries, tmp_path):
    with scripted_upstream() as upstream, proxy_server(upstream, tmp_path / "data") as proxy:
        session = f"cli-{agent}"
        # A git root stops OpenCode's upward search for stray opencode.json files (e.g. in /tmp).
        (tmp_path / "run" / "work").mkdir(parents=True)
        subprocess.run(["git", "init", "-q"], cwd=tmp_path / "run" / "work", check=True)
        run = run_agent(agent, binaries[agent], f"{proxy.url}/s/{session}", tmp_path / "run")
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.proof.exists(), "the scripted tool call did not run"
        rows = proxy.rows(session_id=session)
    agent_rows = [r for r in rows if r["agent"] == agent]
    assert len(agent_rows) >= 2, [(r["agent"], r["path"]) for r in rows]
    assert all(r["agent_session_id"] for r in agent_rows)
    assert all(r["outcome"] == "ok" for r in rows)
    # one call carries the tool call, a later one its result
    assert any("AGENT_PROOF.txt" in (r["response_json"] or "") for r in agent_rows)
    bodies = [json.loads(r["request_json"]) for r in agent_rows]
    assert any(
        "made by the scripted model" in json.dumps(b) or "AGENT_PROOF" in json.dumps(b) for b in bodies[1:]
    )
