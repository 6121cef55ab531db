"""Chat mode and token ids in the relay (MockTransport upstream standing in for vLLM's chat API)."""

from __future__ import annotations

import json

import httpx
import zstandard

from proxy.parquet import to_row
from tests.proxy.conftest import proxied, reply, sse

MSG = {
    "model": "m",
    "max_tokens": 32,
    "stream": False,
    "messages": [{"role": "user", "content": "hi"}],
    "cache_control": {"type": "ephemeral"},
}
CHAT_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "prompt_token_ids": [1, 2, 3],
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "token_ids": [7, 8],
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "Bash", "arguments": '{"command":"ls"}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
CHUNKS = [
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "prompt_token_ids": [1, 2, 3],
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "he"}, "token_ids": [5]}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "llo"}, "token_ids": [6], "finish_reason": "stop"}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    },
]
CHAT_STREAM = sse(*[(None, json.dumps(c)) for c in CHUNKS], (None, "[DONE]"))


def row(call):
    return to_row(call, zstandard.ZstdCompressor())


async def test_messages_are_translated_to_chat_and_back(seen):
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, CHAT_REPLY)

    async with proxied(handler, upstream_api="chat") as (client, sink):
        r = await client.post("/s/t1/v1/messages?beta=true", json=MSG)
    assert r.status_code == 200
    msg = r.json()
    assert msg["type"] == "message"
    assert msg["stop_reason"] == "tool_use"
    assert msg["content"][0] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "Bash",
        "input": {"command": "ls"},
    }
    sent = json.loads(seen[0].content)
    assert seen[0].url.path == "/v1/chat/completions"
    assert sent["return_token_ids"] is True
    assert seen[0].url.query == b""  # `?beta=true` belongs to the Messages route
    rec = row(sink.calls[0])
    assert rec["translated"]
    assert rec["prompt_token_ids"] == [1, 2, 3]
    assert rec["completion_token_ids"] == [7, 8]
    assert json.loads(rec["response_json"])["stop_reason"] == "tool_use"  # stored in the client's shape
    assert any(f.startswith("cache_control") for f in rec["dropped_fields"])  # nothing dropped silently


async def test_streamed_chat_becomes_anthropic_events_with_ids_recorded():
    async with proxied(lambda req: reply(200, CHAT_STREAM, "text/event-stream"), upstream_api="chat") as (
        client,
        sink,
    ):
        r = await client.post("/v1/messages", json={**MSG, "stream": True})
    names = [line.split(": ", 1)[1] for line in r.text.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start"
    assert names[-1] == "message_stop"
    assert "content_block_delta" in names
    assert "message_delta" in names
    assert b"token_ids" not in r.content
    rec = row(sink.calls[0])
    assert rec["prompt_token_ids"] == [1, 2, 3]
    assert rec["completion_token_ids"] == [5, 6]
    body = json.loads(rec["response_json"])
    assert body["content"][0]["text"] == "hello"
    assert rec["finish_reason"] == "end_turn"


async def test_responses_are_translated_both_ways(seen):
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, CHAT_REPLY)

    body = {
        "model": "m",
        "instructions": "be brief",
        "input": "hi",
        "store": False,
        "tools": [{"type": "function", "name": "Bash", "parameters": {"type": "object"}}],
    }
    async with proxied(handler, upstream_api="chat") as (client, sink):
        r = await client.post("/v1/responses", json=body)
    out = r.json()
    assert out["object"] == "response"
    assert out["output"][-1]["type"] == "function_call"
    sent = json.loads(seen[0].content)
    assert sent["messages"][0]["role"] in ("system", "developer")
    assert "store" not in sent
    assert row(sink.calls[0])["completion_token_ids"] == [7, 8]


async def test_native_chat_ids_are_requested_recorded_and_hidden_from_the_client(seen):
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        stream = json.loads(req.content).get("stream")
        return reply(200, CHAT_STREAM, "text/event-stream") if stream else reply(200, CHAT_REPLY)

    async with proxied(handler) as (client, sink):
        plain = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
        streamed = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": [], "stream": True}
        )
        asked = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": [], "return_token_ids": True}
        )
    assert all(json.loads(r.content).get("return_token_ids") for r in seen)
    assert "token_ids" not in plain.text
    assert "prompt_token_ids" not in plain.text
    assert plain.json()["choices"][0]["message"]["tool_calls"][0]["id"] == "call_1"
    assert "token_ids" not in streamed.text
    assert "hello" not in streamed.text
    assert '"he"' in streamed.text
    assert '"llo"' in streamed.text
    assert asked.json()["prompt_token_ids"] == [1, 2, 3]  # the client asked: it gets them
    recs = [row(c) for c in sink.calls]
    assert [r["completion_token_ids"] for r in recs] == [[7, 8], [5, 6], [7, 8]]
    assert all("token_ids" not in r["response_json"] for r in recs)


async def test_count_tokens_in_chat_mode_uses_tokenize(seen):
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, {"count": 4, "tokens": [9, 9, 9, 9], "max_model_len": 100})

    async with proxied(handler, upstream_api="chat") as (client, sink):
        r = await client.post("/v1/messages/count_tokens", json={"model": "m", "messages": MSG["messages"]})
    assert r.json() == {"input_tokens": 4}
    assert seen[0].url.path == "/tokenize"
    rec = row(sink.calls[0])
    assert rec["prompt_token_ids"] == [9, 9, 9, 9]
    assert rec["prompt_tokens"] == 4


async def test_upstream_error_in_chat_mode_comes_back_in_anthropic_shape():
    err = {
        "object": "error",
        "message": "maximum context length is 10 tokens",
        "type": "BadRequestError",
        "code": 400,
    }
    async with proxied(lambda req: reply(400, err), upstream_api="chat") as (client, sink):
        r = await client.post("/v1/messages", json=MSG)
    assert r.status_code == 400
    assert r.json()["type"] == "error"
    assert "maximum context length" in r.json()["error"]["message"]
    assert sink.calls[0].outcome == "upstream_error"


async def test_a_stream_the_translator_cannot_handle_ends_with_an_error_event(monkeypatch):
    from wire import AnthropicStreamTranslator

    def broken(self, raw):
        raise ValueError("unexpected chunk")

    monkeypatch.setattr(AnthropicStreamTranslator, "feed_bytes", broken)
    async with proxied(lambda req: reply(200, CHAT_STREAM, "text/event-stream"), upstream_api="chat") as (
        client,
        sink,
    ):
        r = await client.post("/v1/messages", json={**MSG, "stream": True})
        assert (await client.get("/healthz")).status_code == 200
    assert "event: error" in r.text
    assert sink.calls[0].outcome == "upstream_error"
    assert "unexpected chunk" in (sink.calls[0].error or "")


async def test_a_reply_the_translator_cannot_handle_is_a_502_in_the_clients_shape(monkeypatch):
    import dataclasses

    from wire import API_SHAPES, Api

    def broken(chat, request):
        raise KeyError("choices")

    messages = dataclasses.replace(API_SHAPES[Api.MESSAGES], from_chat=broken)
    monkeypatch.setitem(API_SHAPES, Api.MESSAGES, messages)
    async with proxied(lambda req: reply(200, CHAT_REPLY), upstream_api="chat") as (client, sink):
        r = await client.post("/v1/messages", json=MSG)
        assert (await client.get("/healthz")).status_code == 200
    assert r.status_code == 502
    assert r.json()["type"] == "error"
    assert sink.calls[0].outcome == "upstream_error"
    assert "KeyError" in (sink.calls[0].error or "")
