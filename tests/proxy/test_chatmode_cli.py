"""Real CLIs, unchanged, against a Chat-Completions-only upstream through the translating proxy.

Fake: only the model (the scripted upstream serves nothing but Chat Completions, and answers one
shell tool call, then text). Every stored call must carry exact prompt and completion token ids.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sandboxes.agents.npm_install import ensure_installed
from tests.fakes.agent_runs import run_agent
from tests.proxy.live import proxy_server, scripted_upstream
from tests.support import REPO_ROOT

pytestmark = [pytest.mark.cli, pytest.mark.slow]

CASES = [  # agent, its options, the API it speaks
    ("claude-code", {}, "anthropic_messages"),
    ("codex", {}, "openai_responses"),
    ("opencode", {"provider": "anthropic"}, "anthropic_messages"),
    ("opencode", {}, "openai_chat"),
]


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    return ensure_installed(REPO_ROOT / ".cache" / "agents")


@pytest.fixture(scope="module")
def chat_only():
    with scripted_upstream(apis="chat") as url:
        yield url


@pytest.mark.parametrize(("agent", "options", "api"), CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_agent_runs_unchanged_against_a_chat_only_upstream(
    agent, options, api, binaries, chat_only, tmp_path
):
    workdir = tmp_path / "run" / "work"
    workdir.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)  # stops OpenCode's config search
    with proxy_server(chat_only, tmp_path / "data", "--upstream-api", "chat") as proxy:
        session = f"chat-{agent}-{api}"
        run = run_agent(agent, binaries[agent], f"{proxy.url}/s/{session}", tmp_path / "run", **options)
        assert run.returncode == 0, (run.stdout[-1500:], run.stderr[-1500:])
        assert run.proof.exists(), "the translated tool call did not run"
        rows = proxy.rows(session_id=session)
    model_rows = [r for r in rows if r["api"] == api]
    assert len(model_rows) >= 2
    assert all(r["outcome"] == "ok" for r in rows)
    for r in model_rows:
        assert r["prompt_token_ids"], r["call_id"]
        assert r["completion_token_ids"], r["call_id"]
        assert r["token_ids_source"] == "upstream"
        assert len(r["completion_token_ids"]) == r["completion_tokens"]
        assert r["translated"] is (api != "openai_chat")
        sent = json.loads(r["upstream_request_json"])
        assert sent["return_token_ids"] is True
        assert "messages" in sent
    # The first call carried the tool call, in the client's own API shape; a later call carried its result.
    assert any("AGENT_PROOF.txt" in r["response_json"] for r in model_rows)
    assert any(
        "made by the scripted model" in r["request_json"] or "AGENT_PROOF" in r["request_json"]
        for r in model_rows[1:]
    )
