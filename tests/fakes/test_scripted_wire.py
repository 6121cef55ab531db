"""Wire formats of the scripted upstream, through httpx's ASGI transport (no sockets)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.fakes.scripted_policy import FINAL_TEXT, PROOF_COMMAND, SIDE_TEXT, encode
from tests.fakes.scripted_upstream import create_app
from tests.fakes.shell_tools import BASH_ANTHROPIC, BASH_CHAT
from tests.fakes.sse import parse_sse

USER = [{"role": "user", "content": "make the file"}]
EXEC_RESPONSES = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://scripted") as c:
        yield c


def anthropic_body(**extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "max_tokens": 100, "messages": USER, "tools": [BASH_ANTHROPIC], **extra}


async def test_anthropic_stream_is_one_tool_use_block_in_order(client):
    r = await client.post("/v1/messages?beta=true", json=anthropic_body(stream=True))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    names = [name for name, _ in events]
    assert names[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert all(name == data["type"] for name, data in events)
    block = events[2][1]["content_block"]
    assert block["type"] == "tool_use"
    assert block["name"] == "Bash"
    partial = "".join(d["delta"]["partial_json"] for n, d in events if n == "content_block_delta")
    assert json.loads(partial) == {"command": PROOF_COMMAND}
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    # cumulative usage: message_delta repeats the input tokens of message_start
    assert delta["usage"]["input_tokens"] == events[0][1]["message"]["usage"]["input_tokens"] > 0


async def test_anthropic_after_tool_result_answers_text(client):
    messages = [
        *USER,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ]
    r = await client.post("/v1/messages", json=anthropic_body(messages=messages))
    body = r.json()
    assert body["type"] == "message"
    assert body["stop_reason"] == "end_turn"
    assert body["content"] == [{"type": "text", "text": FINAL_TEXT}]
    streamed = parse_sse(
        (await client.post("/v1/messages", json=anthropic_body(messages=messages, stream=True))).text
    )
    text = "".join(d["delta"]["text"] for n, d in streamed if n == "content_block_delta")
    assert text == FINAL_TEXT


async def test_side_call_without_tools_answers_text(client):
    r = await client.post("/v1/messages", json=anthropic_body(tools=[]))
    assert r.json()["content"][0]["text"] == SIDE_TEXT


async def test_count_tokens_and_models(client):
    r = await client.post("/v1/messages/count_tokens", json={"model": "m", "messages": USER})
    assert r.json()["input_tokens"] > 0
    openai_models = (await client.get("/v1/models")).json()
    assert openai_models["object"] == "list"
    assert openai_models["data"][0]["id"] == "scripted"
    anthropic_models = (await client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})).json()
    assert anthropic_models["data"][0]["type"] == "model"
    assert anthropic_models["has_more"] is False


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "messages": USER, "tools": [BASH_CHAT], **extra}


async def test_chat_stream_token_ids_and_usage(client):
    body = chat_body(stream=True, return_token_ids=True, stream_options={"include_usage": True})
    events = parse_sse((await client.post("/v1/chat/completions", json=body)).text)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    tokenized = (await client.post("/tokenize", json={"messages": USER, "tools": [BASH_CHAT]})).json()
    assert chunks[0]["prompt_token_ids"] == tokenized["tokens"]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["prompt_tokens"] == tokenized["count"]
    deltas = [c["choices"][0] for c in chunks[:-1]]
    calls = [d["delta"]["tool_calls"][0] for d in deltas if "tool_calls" in d["delta"]]
    assert calls[0]["function"]["name"] == "bash"
    assert calls[0]["id"].startswith("call_")
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"command": PROOF_COMMAND}
    ids = [t for d in deltas for t in d["token_ids"]]
    assert ids == encode(arguments)
    assert usage_chunk["usage"]["completion_tokens"] == len(ids)
    assert deltas[-1]["finish_reason"] == "tool_calls"


async def test_chat_without_options_has_no_ids_or_usage_chunk(client):
    events = parse_sse((await client.post("/v1/chat/completions", json=chat_body(stream=True))).text)
    chunks = [data for _, data in events[:-1]]
    assert all(c["choices"] for c in chunks)
    assert all("usage" not in c for c in chunks)
    assert all("token_ids" not in c["choices"][0] and "prompt_token_ids" not in c for c in chunks)


async def test_chat_non_stream_tool_result_and_token_ids(client):
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    body = (
        await client.post("/v1/chat/completions", json=chat_body(messages=messages, return_token_ids=True))
    ).json()
    choice = body["choices"][0]
    assert body["object"] == "chat.completion"
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == FINAL_TEXT
    assert choice["token_ids"] == encode(FINAL_TEXT)
    assert len(body["prompt_token_ids"]) == body["usage"]["prompt_tokens"]


async def test_openai_sdk_reads_chat_and_responses_streams():
    from openai import AsyncOpenAI

    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app()))
    sdk = AsyncOpenAI(base_url="http://scripted/v1", api_key="k", http_client=http)
    stream = await sdk.chat.completions.create(
        model="scripted", messages=USER, tools=[BASH_CHAT], stream=True
    )
    names = [
        c.choices[0].delta.tool_calls[0].function.name async for c in stream if c.choices[0].delta.tool_calls
    ]
    assert names[0] == "bash"
    async with sdk.responses.stream(model="scripted", input="hi", tools=[EXEC_RESPONSES]) as events:
        async for _ in events:
            pass
        final = await events.get_final_response()
    assert final.output[0].type == "function_call"
    assert final.output[0].name == "exec_command"
    text = await sdk.responses.create(model="scripted", input="hi")
    assert text.output_text == SIDE_TEXT
    await http.aclose()


async def test_responses_stream_sequence_numbers_and_function_call(client):
    body = {"model": "scripted", "input": "hi", "tools": [EXEC_RESPONSES], "stream": True}
    events = parse_sse((await client.post("/v1/responses", json=body)).text)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert [n for n, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    done = events[-1][1]["response"]
    call = done["output"][0]
    assert json.loads(call["arguments"]) == {"cmd": PROOF_COMMAND}
    assert done["status"] == "completed"
    assert done["usage"]["output_tokens"] == len(encode(call["arguments"]))


async def test_responses_tool_output_and_local_shell(client):
    tool_output = [{"type": "function_call_output", "call_id": "c", "output": "ok"}]
    body = (await client.post("/v1/responses", json={"model": "m", "input": tool_output})).json()
    assert body["output"][0]["content"][0]["text"] == FINAL_TEXT
    shell = (
        await client.post(
            "/v1/responses", json={"model": "m", "input": "x", "tools": [{"type": "local_shell"}]}
        )
    ).json()
    assert shell["output"][0]["type"] == "local_shell_call"
    assert shell["output"][0]["action"]["command"] == ["bash", "-lc", PROOF_COMMAND]


async def test_legacy_completions(client):
    body = {"model": "m", "prompt": "abc", "return_token_ids": True}
    full = (await client.post("/v1/completions", json=body)).json()
    assert full["object"] == "text_completion"
    assert full["choices"][0]["prompt_token_ids"] == encode("abc")
    events = parse_sse((await client.post("/v1/completions", json={**body, "stream": True})).text)
    assert events[-1][1] == "[DONE]"
    assert events[0][1]["choices"][0]["prompt_token_ids"] == encode("abc")
    ids = [t for _, d in events[:-1] for t in d["choices"][0].get("token_ids") or []]
    assert ids == full["choices"][0]["token_ids"]
    assert "".join(d["choices"][0]["text"] for _, d in events[:-1]) == full["choices"][0]["text"]


def _text_deltas(events: list[tuple[str | None, Any]]) -> int:
    """Count text-carrying events in any of the three streamed APIs."""
    count = 0
    for name, data in events:
        if name in ("content_block_delta", "response.output_text.delta"):
            count += 1
        elif name is None and isinstance(data, dict) and data["choices"]:
            count += bool(data["choices"][0]["delta"].get("content"))
    return count


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": USER}),
        ("/v1/messages", {"messages": USER, "max_tokens": 5}),
        ("/v1/responses", {"input": "hi"}),
    ],
)
async def test_bench_streams_exactly_n_deltas_without_tool_logic(client, path, body):
    payload = {**body, "model": "bench-37", "stream": True, "tools": [BASH_CHAT]}
    assert _text_deltas(parse_sse((await client.post(path, json=payload)).text)) == 37
