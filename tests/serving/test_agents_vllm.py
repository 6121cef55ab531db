"""The agents' three wire formats through the proxy to a real vLLM CPU server of SmolLM2 (make target's).

The bodies are the CLIs' captured first requests (tests/fixtures/agents), cut to two tools and a short
system prompt so a CPU prefills them in seconds: every field shape the CLIs send stays (Claude Code's
billing header, cache_control, thinking, the deferred-tool placeholder; Codex's developer message and
namespace tools; OpenCode's stream options and 32,000-token limit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from serving.check import check_target
from tests.proxy.live import proxy_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "agents"


def body(agent: str) -> dict[str, Any]:
    raw = json.loads((FIXTURES / agent / "first_request.json").read_text())["body"]
    b = json.loads(raw) if isinstance(raw, str) else raw
    b["model"] = "smollm2"
    if agent == "claude-code":
        b["system"] = [*b["system"][:2], {"type": "text", "text": "Work in the repository."}]
        keep = [t for t in b["tools"] if t.get("name") in ("Bash", "Read", "DeferredToolPlaceholder")]
        b["tools"] = keep
    elif agent == "codex":
        b["instructions"] = "You are Codex, a coding agent."
        b["input"] = [m for m in b["input"] if m.get("role") != "developer"][-1:]
        b["tools"] = [t for t in b["tools"] if t.get("name") in ("exec_command", "apply_patch")]
    else:
        b["messages"] = [{"role": "system", "content": "You are OpenCode."}, *b["messages"][-1:]]
        b["tools"] = [t for t in b["tools"] if t["function"]["name"] in ("bash", "read")]
    return b


PATHS = {
    "claude-code": "/v1/messages?beta=true",
    "codex": "/v1/responses",
    "opencode": "/v1/chat/completions",
}
APIS = {"claude-code": "anthropic_messages", "codex": "openai_responses", "opencode": "openai_chat"}


def test_the_served_target_is_ready_for_the_agents(smollm2_vllm: str) -> None:
    result = check_target(smollm2_vllm)
    assert result.problems == []
    assert (result.model, result.max_model_len) == ("smollm2", 16384)


@pytest.fixture(scope="module")
def chat_rows(smollm2_vllm: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One call of each agent through a chat-mode proxy (the harvest's): ids from return_token_ids."""
    data = tmp_path_factory.mktemp("chat")
    with proxy_server(smollm2_vllm, data, "--upstream-api", "chat", "--max-tokens-cap", "16") as proxy:
        for agent, path in PATHS.items():
            r = httpx.post(f"{proxy.url}/s/chat-{agent}{path}", json=body(agent), timeout=600)
            assert r.status_code == 200, (agent, r.text[:500])
        return {r["session_id"].removeprefix("chat-"): r for r in proxy.rows()}


@pytest.mark.parametrize("agent", list(PATHS))
def test_each_agents_call_is_answered_by_vllm_with_exact_ids(
    chat_rows: dict[str, dict[str, Any]], agent: str
) -> None:
    row = chat_rows[agent]
    assert (row["api"], row["status_code"], row["outcome"]) == (APIS[agent], 200, "ok")
    assert row["token_ids_source"] == "upstream"
    assert len(row["prompt_token_ids"]) == row["prompt_tokens"]  # vLLM's own ids, as many as it counted
    assert 0 < len(row["completion_token_ids"]) == row["completion_tokens"] <= 16
    assert row["max_tokens_capped"] == 16  # the agents ask for 32,000 (Codex for none): lowered, recorded
    assert row["translated"] is (agent != "opencode")


def test_native_mode_fills_ids_only_where_vllm_rendered_what_the_translation_does(
    smollm2_vllm: str, tmp_path: Path
) -> None:
    """vLLM's own /v1/responses renders Codex's call as the translation does, so /tokenize gives the ids it
    saw; its /v1/messages keeps Claude Code's `defer_loading` placeholder tool, which the translation drops,
    so those ids would be wrong and none are recorded (the count stays, from vLLM's usage)."""
    args = ("--upstream-api", "native", "--tokenize-native", "--max-tokens-cap", "8")
    with proxy_server(smollm2_vllm, tmp_path, *args) as proxy:
        for agent in ("claude-code", "codex"):
            r = httpx.post(f"{proxy.url}/s/native-{agent}{PATHS[agent]}", json=body(agent), timeout=600)
            assert r.status_code == 200, r.text[:500]
        rows = {r["session_id"]: r for r in proxy.rows()}
    codex, claude = rows["native-codex"], rows["native-claude-code"]
    assert not codex["translated"]
    assert codex["token_ids_source"] == "tokenize"
    assert len(codex["prompt_token_ids"]) == codex["prompt_tokens"]
    assert claude["prompt_token_ids"] is None
    assert claude["prompt_tokens"] > 0
