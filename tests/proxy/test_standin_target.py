"""A real Claude Code request, translated by the proxy, served by the CPU stand-in target.

Nothing is faked: the request body is a real capture (tests/fixtures/agents/claude-code), the target is
the project's tiny Qwen3 (real Qwen3 tokenizer and chat template). The token ids the proxy stores must
equal the target tokenizer's own rendering of the request the proxy actually sent.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.proxy.live import proxy_server, standin_target
from tests.support import REPO_ROOT

pytestmark = pytest.mark.slow
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "agents" / "claude-code" / "first_request.json"


def test_translated_claude_code_request_ids_equal_the_targets_rendering(tmp_path):
    from lm import load_target

    capture = json.loads(FIXTURE.read_text())
    body = {**capture["body"], "model": "tiny-qwen3", "max_tokens": 4, "stream": True}
    with (
        standin_target(40000, timeout=180) as target_url,
        proxy_server(target_url, tmp_path / "data", "--upstream-api", "chat") as proxy,
    ):
        headers = {
            k: v
            for k, v in capture["headers"]
            if k in ("user-agent", "anthropic-version", "anthropic-beta", "x-claude-code-session-id")
        }
        r = httpx.post(
            f"{proxy.url}/s/standin/v1/messages?beta=true", json=body, headers=headers, timeout=300
        )
        assert r.status_code == 200, r.text[:500]
        assert "message_stop" in r.text
        (row,) = proxy.rows(session_id="standin")
    sent = json.loads(row["upstream_request_json"])
    target = load_target("tiny-qwen3")
    expected = target.render(sent["messages"], sent.get("tools"))
    assert row["agent"] == "claude-code"
    assert row["translated"]
    assert len(expected) > 5000  # the whole Claude Code system prompt and tools were rendered
    assert row["prompt_token_ids"] == expected
    assert row["prompt_tokens"] == len(expected)
    assert 1 <= len(row["completion_token_ids"]) <= 4
