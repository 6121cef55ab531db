"""Completion limits fitted to what the target serves (proxy/limits.py), against a MockTransport upstream:
vLLM refuses `max_tokens` above its context with a 400, which the agents' 32,000 always is on a CPU target."""

from __future__ import annotations

import gzip
import json

import httpx

from proxy.limits import capped
from proxy.parquet import to_row
from tests.proxy.conftest import proxied, reply

CHAT = {"model": "m", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]}
ANSWER = b'{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"yo"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}'


def _row(call):  # type: ignore[no-untyped-def]
    return to_row(call, __import__("zstandard").ZstdCompressor())


def test_capped_lowers_each_apis_field_and_sets_one_only_under_an_explicit_cap() -> None:
    assert capped("openai_chat", {"max_completion_tokens": 9000}, None, 8192) == (
        {"max_completion_tokens": 8192},
        8192,
    )
    assert capped("anthropic_messages", {"max_tokens": 32000}, 64, 8192) == ({"max_tokens": 64}, 64)
    assert capped("openai_responses", {}, 64, 8192) == ({"max_output_tokens": 64}, 64)
    assert capped("openai_responses", {}, None, 8192) is None  # vLLM stops at its context by itself
    assert capped("anthropic_messages", {"max_tokens": 16}, 64, 8192) is None
    assert capped("openai_models", {"max_tokens": 99999}, 64, 8192) is None
    assert capped("openai_chat", {"max_tokens": 32000}, None, None) is None


async def test_an_agent_sized_limit_is_lowered_to_the_served_context_and_recorded(seen):  # type: ignore[no-untyped-def]
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, ANSWER)

    async with proxied(handler, served_context=8192, return_token_ids=False) as (client, sink):
        r = await client.post("/s/s1/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    assert r.content == ANSWER
    assert json.loads(seen[0].content)["max_tokens"] == 8192
    row = _row(sink.calls[0])
    assert row["max_tokens_capped"] == 8192
    assert json.loads(row["request_json"])["max_tokens"] == 32000  # the client's own limit is kept
    assert json.loads(row["upstream_request_json"])["max_tokens"] == 8192


async def test_a_limit_within_the_context_is_relayed_byte_for_byte(seen):  # type: ignore[no-untyped-def]
    raw = json.dumps({**CHAT, "max_tokens": 16}).encode()

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, ANSWER)

    async with proxied(handler, served_context=8192, return_token_ids=False) as (client, sink):
        await client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert seen[0].content == raw
    assert _row(sink.calls[0])["max_tokens_capped"] is None


async def test_a_compressed_body_goes_up_plain_once_capped(seen):  # type: ignore[no-untyped-def]
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, ANSWER)

    body = gzip.compress(json.dumps(CHAT).encode())
    async with proxied(handler, max_tokens_cap=64, return_token_ids=False) as (client, _sink):
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        await client.post("/v1/chat/completions", content=body, headers=headers)
    assert "content-encoding" not in seen[0].headers
    assert json.loads(seen[0].content)["max_tokens"] == 64


async def test_the_served_context_is_read_from_the_upstream_at_start(seen):  # type: ignore[no-untyped-def]
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.path == "/v1/models":
            return reply(200, b'{"data":[{"id":"m","max_model_len":4096}]}')
        return reply(200, ANSWER)

    async with proxied(handler, discover_context=True, return_token_ids=False) as (client, sink):
        await client.post("/v1/chat/completions", json=CHAT)
    assert [r.url.path for r in seen] == ["/v1/models", "/v1/chat/completions"]
    assert json.loads(seen[1].content)["max_tokens"] == 4096
    assert _row(sink.calls[0])["max_tokens_capped"] == 4096
