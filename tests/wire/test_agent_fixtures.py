"""Real requests captured from the agent CLIs (tests/fixtures/agents/<agent>/*.json), translated to Chat."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.responses import Response
from pydantic import TypeAdapter

from tests.wire.vllm import Stream, parse_sse, run
from wire import (
    AnthropicStreamTranslator,
    ResponsesStreamTranslator,
    anthropic_to_chat_request,
    chat_to_anthropic_request,
    chat_to_responses_request,
    count_tokens_to_tokenize_request,
    responses_to_chat_request,
)
from wire.responses_request import responses_tool_map

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
CHAT_MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
CHAT_TOOLS = TypeAdapter(list[ChatCompletionToolParam])


def captured(path_prefix: str) -> list[Any]:
    found = []
    for file in sorted(FIXTURES.glob("*/*.json")):
        record = json.loads(file.read_text())
        if (
            isinstance(record, dict)
            and record.get("path") == path_prefix
            and isinstance(record.get("body"), dict)
        ):
            found.append(pytest.param(record["body"], id=f"{file.parent.name}/{file.stem}"))
    return found or [pytest.param(None, marks=pytest.mark.skip(reason=f"no captured {path_prefix} requests"))]


def anthropic_calls(body: dict[str, Any]) -> tuple[list[tuple[str, str, Any]], list[tuple[str, str]]]:
    calls, results = [], []
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_use":
                calls.append((block["id"], block["name"], block["input"]))
            elif block.get("type") == "tool_result":
                content = block["content"]
                text = (
                    content
                    if isinstance(content, str)
                    else "\n".join(b["text"] for b in content if b["type"] == "text")
                )
                results.append((block["tool_use_id"], text))
    return calls, results


@pytest.mark.parametrize("body", captured("/v1/messages"))
def test_real_messages_requests_translate(body: dict[str, Any]) -> None:
    t = anthropic_to_chat_request(body, return_token_ids=True)
    chat = t.request
    text = json.dumps(chat)
    CHAT_MESSAGES.validate_python(chat["messages"])
    CHAT_TOOLS.validate_python(chat.get("tools", []))
    assert "cache_control" not in text
    assert "x-anthropic-billing-header" not in text
    assert "defer_loading" not in text
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}
    assert chat["return_token_ids"] is True
    assert chat["messages"][0]["role"] == "system"
    # Every tool call and tool result survives, in order, with the same ids.
    calls = [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for m in chat["messages"]
        for c in m.get("tool_calls", [])
    ]
    results = [(m["tool_call_id"], m["content"]) for m in chat["messages"] if m["role"] == "tool"]
    assert (calls, results) == anthropic_calls(body)
    assert anthropic_calls(chat_to_anthropic_request(chat)) == (calls, results)
    # Every field of the body that did not go through unchanged is reported.
    paths = {n.path.split("(")[0].split(".")[0].split("[")[0] for n in t.dropped}
    for field in ("metadata", "context_management", "output_config", "thinking"):
        if field in body:
            assert field in paths
    expected_tools = [x["name"] for x in body.get("tools", []) if not x.get("defer_loading")]
    assert [x["function"]["name"] for x in chat.get("tools", [])] == expected_tools


@pytest.mark.parametrize("body", captured("/v1/messages"))
def test_real_messages_requests_count_tokens(body: dict[str, Any]) -> None:
    count_body: dict[str, Any] = {
        k: body[k] for k in ("model", "messages", "system", "tools", "thinking") if k in body
    }
    tokenize = count_tokens_to_tokenize_request(count_body).request
    assert tokenize["messages"] == anthropic_to_chat_request(body).request["messages"]
    assert tokenize["add_generation_prompt"] is True


@pytest.mark.parametrize("body", captured("/v1/messages"))
def test_real_messages_request_answered_by_a_tool_call_stream(body: dict[str, Any]) -> None:
    tool = (body.get("tools") or [{"name": "Bash"}])[0]["name"]
    s = (
        Stream()
        .role()
        .reasoning("plan")
        .tool(0, "call_x", tool, '{"command": ', '"ls"}')
        .finish("tool_calls")
        .usage()
    )
    tr = AnthropicStreamTranslator(body)
    events = parse_sse(run(tr, s))
    assert events[0][1]["message"]["model"] == body["model"]
    assert tr.message["content"][-1] == {
        "type": "tool_use",
        "id": "call_x",
        "name": tool,
        "input": {"command": "ls"},
    }
    assert tr.message["stop_reason"] == "tool_use"


def responses_calls(body: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, Any]]]:
    calls = [(i["call_id"], i["name"]) for i in body["input"] if i.get("type") == "function_call"]
    outputs = [(i["call_id"], i["output"]) for i in body["input"] if i.get("type") == "function_call_output"]
    return calls, outputs


@pytest.mark.parametrize("body", captured("/v1/responses"))
def test_real_responses_requests_translate(body: dict[str, Any]) -> None:
    t = responses_to_chat_request(body, return_token_ids=True)
    chat = t.request
    CHAT_MESSAGES.validate_python(chat["messages"])
    CHAT_TOOLS.validate_python(chat.get("tools", []))
    assert chat["messages"][0]["role"] == "system"
    assert [m["role"] for m in chat["messages"]].count(
        "system"
    ) == 1  # Codex's developer messages lead, joined
    assert "developer" not in {m["role"] for m in chat["messages"]}
    calls = [(c["id"], c["function"]["name"]) for m in chat["messages"] for c in m.get("tool_calls", [])]
    outputs = [(m["tool_call_id"], m["content"]) for m in chat["messages"] if m["role"] == "tool"]
    assert (calls, outputs) == responses_calls(body)
    assert responses_calls(chat_to_responses_request(chat)) == (calls, outputs)
    functions = [x["name"] for x in body.get("tools", []) if x.get("type") == "function"]
    names = [x["function"]["name"] for x in chat.get("tools", [])]
    assert set(functions) <= set(names)
    hosted = {x["type"] for x in body.get("tools", [])} - {"function", "namespace", "custom"}
    dropped = {n.path for n in t.dropped if n.action == "dropped"}
    assert {f"tools[*](type={k})" for k in hosted} <= dropped
    for field in ("store", "include", "prompt_cache_key", "client_metadata"):
        if field in body:
            assert field in dropped


@pytest.mark.parametrize("body", captured("/v1/responses"))
def test_real_responses_request_answered_by_a_namespaced_tool_call_stream(body: dict[str, Any]) -> None:
    chat = responses_to_chat_request(body).request
    flattened = list(responses_tool_map(body.get("tools")).namespaced)
    name = flattened[0] if flattened else chat["tools"][-1]["function"]["name"]
    s = Stream().role().tool(0, "call_y", name, '{"target": "a"}').finish("tool_calls").usage()
    tr = ResponsesStreamTranslator(body)
    events = parse_sse(run(tr, s))
    final = events[-1][1]["response"]
    Response.model_validate(final)
    item = final["output"][0]
    assert item["type"] == "function_call"
    assert item["call_id"] == "call_y"
    namespaces = {x["name"]: x for x in body["tools"] if x.get("type") == "namespace"}
    if flattened:  # Codex sends namespaced tools: the call goes back with its namespace and short name
        assert item["namespace"] in namespaces
        assert item["name"] in [f["name"] for f in namespaces[item["namespace"]]["tools"]]
    else:
        assert item["name"] == name
        assert "namespace" not in item
