"""The three real agent CLIs, headless, straight against the scripted upstream (no proxy).

Fake: only the model (a GPU vLLM cannot run here); the CLIs and their shell tool are real. Proves the
scripted upstream drives each CLI through one real tool call and a normal finish, which the proxy,
translation and sandbox tests build on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sandboxes.agents.npm_install import ensure_installed
from tests.fakes.agent_runs import AgentRun, run_agent
from tests.fakes.capture_agents import classify
from tests.fakes.scripted_policy import FINAL_TEXT, PROOF_TEXT
from tests.proxy.live import scripted_upstream
from tests.support import REPO_ROOT

pytestmark = pytest.mark.cli


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    return ensure_installed(REPO_ROOT / ".cache" / "agents")


@pytest.fixture(scope="module")
def all_apis() -> Iterator[str]:
    with scripted_upstream("all") as url:
        yield url


@pytest.fixture(scope="module")
def chat_only() -> Iterator[str]:
    with scripted_upstream("chat") as url:
        yield url


def final_text(run: AgentRun) -> str:
    """The last answer text in the CLI's own JSON transcript."""
    text = ""
    for event in run.json_events():
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        part = event.get("part") if isinstance(event.get("part"), dict) else {}
        if event.get("type") == "result":  # Claude Code stream-json
            text = str(event.get("result"))
        elif item.get("type") == "agent_message":  # codex exec --json
            text = str(item.get("text"))
        elif part.get("type") == "text":  # opencode run --format json
            text = str(part.get("text"))
    return text


def check(run: AgentRun, url: str) -> None:
    assert run.returncode == 0, f"{run.agent} exited {run.returncode}:\n{run.stderr[-3000:]}"
    assert run.proof.read_text() == PROOF_TEXT + "\n", "the scripted shell call did not run"
    assert final_text(run) == FINAL_TEXT
    kinds = [classify(r) for r in httpx.get(url + "/_scripted/requests").json()]
    assert "first_request" in kinds
    assert "tool_result_request" in kinds


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_agent_runs_the_scripted_tool_call(agent, binaries, all_apis, tmp_path):
    httpx.delete(all_apis + "/_scripted/requests")
    run = run_agent(agent, binaries[agent], all_apis, tmp_path)
    check(run, all_apis)


@pytest.mark.slow  # OpenCode spends ≈ 12 s of CPU starting up
def test_opencode_against_a_chat_only_upstream(binaries, chat_only, tmp_path):
    httpx.delete(chat_only + "/_scripted/requests")
    run = run_agent("opencode", binaries["opencode"], chat_only, tmp_path)
    check(run, chat_only)
    records = httpx.get(chat_only + "/_scripted/requests").json()
    assert {r["path"] for r in records} == {"/v1/chat/completions"}
    # the title side call goes to small_model with no tools and the same session header
    assert "side_request" in [classify(r) for r in records]
    sessions = {dict(r["headers"]).get("x-session-id") for r in records}
    assert len(sessions) == 1
    assert next(iter(sessions)).startswith("ses_")


@pytest.mark.slow
def test_opencode_through_its_bundled_anthropic_provider(binaries, all_apis, tmp_path):
    """@ai-sdk/anthropic ships inside the opencode binary: no npm install needed (npm is offline here)."""
    httpx.delete(all_apis + "/_scripted/requests")
    run = run_agent("opencode", binaries["opencode"], all_apis, tmp_path, provider="anthropic")
    check(run, all_apis)
    records = httpx.get(all_apis + "/_scripted/requests").json()
    assert {r["path"] for r in records} == {"/v1/messages"}
    assert all(dict(r["headers"]).get("anthropic-version") == "2023-06-01" for r in records)
    assert json.dumps(records).count('"tool_result"') >= 1
