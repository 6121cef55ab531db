"""The captured CLI requests (tests/fixtures/agents) hold the facts the README there states, and the
scripted upstream answers each of them as the CLIs need: the first with a shell call, the rest with text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.scripted_policy import FINAL_TEXT, PROOF_FILE, SIDE_TEXT
from tests.fakes.scripted_upstream import create_app
from tests.fakes.sse import parse_sse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"

# fixture dir: (User-Agent prefix, session header(s), path, query, shell tool, shell argument key)
FACTS: dict[str, tuple[str, tuple[str, ...], str, str, str, str]] = {
    "claude-code": (
        "claude-cli/",
        ("x-claude-code-session-id",),
        "/v1/messages",
        "beta=true",
        "Bash",
        "command",
    ),
    "codex": ("codex_exec/", ("session-id", "thread-id"), "/v1/responses", "", "exec_command", "cmd"),
    "opencode": ("opencode/", ("x-session-id",), "/v1/chat/completions", "", "bash", "command"),
    "opencode-anthropic": ("opencode/", ("x-session-id",), "/v1/messages", "", "bash", "command"),
}


def load(name: str, kind: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / f"{kind}.json").read_text())


def header(record: dict[str, Any], name: str) -> str | None:
    return next((v for k, v in record["headers"] if k.lower() == name), None)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_fixture_facts(name: str):
    ua, session_headers, path, query, tool, _ = FACTS[name]
    first, second = load(name, "first_request"), load(name, "tool_result_request")
    for record in (first, second):
        assert record["path"] == path
        assert record["query"] == query
        assert header(record, "user-agent").startswith(ua)
        assert record["body"]["stream"] is True
        assert not record["body_compressed"]
        assert "<redacted>" in (header(record, "authorization") or header(record, "x-api-key") or "")
    for h in session_headers:  # the agent's session id is stable across its calls
        assert header(first, h)
        assert header(first, h) == header(second, h)
    tools = first["body"]["tools"]
    names = [t.get("name") or t.get("function", {}).get("name") for t in tools]
    assert tool in names


@pytest.mark.parametrize("name", ["opencode", "opencode-anthropic"])
def test_opencode_title_side_call_has_no_tools_and_same_session(name: str):
    side, first = load(name, "side_request"), load(name, "first_request")
    assert not side["body"].get("tools")
    assert "title" in json.dumps(side["body"]).lower()
    assert header(side, "x-session-id") == header(first, "x-session-id")


# where each CLI's JSON transcript names its session id
TRANSCRIPT_SESSION_KEY = {"claude-code": "session_id", "codex": "thread_id", "opencode": "sessionID"}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_transcript_session_id_is_the_header_session_id(name: str):
    first = load(name, "first_request")
    key = TRANSCRIPT_SESSION_KEY[first["agent"]]
    lines = (FIXTURES / name / "transcript.jsonl").read_text().splitlines()
    ids = {event[key] for event in map(json.loads, filter(None, lines)) if key in event}
    assert ids == {header(first, FACTS[name][1][0])}


def test_claude_default_traffic_probes_api_hello_without_credentials():
    probe = load("claude-code-default-traffic", "probe_request")
    assert (probe["method"], probe["path"]) == ("HEAD", "/api/hello")
    assert header(probe, "user-agent").startswith("Bun/")
    assert not header(probe, "x-api-key")
    assert not header(probe, "authorization")


def test_claude_session_id_also_in_metadata():
    first = load("claude-code", "first_request")
    user_id = json.loads(first["body"]["metadata"]["user_id"])
    assert user_id["session_id"] == header(first, "x-claude-code-session-id")


def _answer(events: list[tuple[str | None, Any]]) -> tuple[str, dict[str, Any], str]:
    """(tool name or "", tool arguments, text) assembled from any API's stream."""
    text, tool, args = "", "", ""
    for name, data in events:
        if not isinstance(data, dict):
            continue
        if name == "content_block_start" and data["content_block"]["type"] == "tool_use":
            tool = data["content_block"]["name"]
        elif name == "content_block_delta":
            text += data["delta"].get("text", "")
            args += data["delta"].get("partial_json", "")
        elif name == "response.output_item.added" and data["item"]["type"] == "function_call":
            tool = data["item"]["name"]
        elif name == "response.function_call_arguments.delta":
            args += data["delta"]
        elif name == "response.output_text.delta":
            text += data["delta"]
        elif name is None and data.get("choices"):
            delta = data["choices"][0]["delta"]
            for call in delta.get("tool_calls") or []:
                tool = call["function"].get("name") or tool
                args += call["function"].get("arguments", "")
            text += delta.get("content") or ""
    return tool, json.loads(args) if args else {}, text


@pytest.mark.parametrize("name", sorted(FACTS))
async def test_scripted_upstream_answers_the_real_requests(name: str):
    _, _, path, query, tool, arg = FACTS[name]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app()), base_url="http://s") as c:
        replies = {}
        kinds = ["first_request", "tool_result_request"]
        kinds += ["side_request"] if (FIXTURES / name / "side_request.json").exists() else []
        for kind in kinds:
            r = await c.post(f"{path}?{query}", json=load(name, kind)["body"])
            assert r.status_code == 200
            replies[kind] = _answer(parse_sse(r.text))
        seen = (await c.get("/_scripted/requests")).json()[0]["body"]
    called, arguments, text = replies["first_request"]
    assert (called, text) == (tool, "")
    assert PROOF_FILE in arguments[arg]  # built from the tool's own schema: command vs cmd
    assert replies["tool_result_request"] == ("", {}, FINAL_TEXT)
    if "side_request" in replies:
        assert replies["side_request"] == ("", {}, SIDE_TEXT)
    assert seen == load(name, "first_request")["body"]
