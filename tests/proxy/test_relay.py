"""Relay behaviour against a MockTransport upstream: routes, attribution, keys, bytes, errors."""

from __future__ import annotations

import gzip
import json

import httpx

from proxy.parquet import to_row
from tests.proxy.conftest import proxied, reply, sse

MSG = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
CLAUDE_UA = "claude-cli/2.1.332 (external, sdk-cli)"


async def test_non_stream_body_is_relayed_byte_for_byte_and_attributed(seen):
    upstream_body = b'{"id":"msg_1", "type":"message","content":[{"type":"text","text":"yo"}],  "stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}'

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, upstream_body)

    async with proxied(handler) as (client, sink):
        r = await client.post(
            "/s/sess-1/v1/messages?beta=true",
            json=MSG,
            headers={"user-agent": CLAUDE_UA, "x-claude-code-session-id": "cc-uuid", "x-api-key": "dummy"},
        )
    assert r.status_code == 200
    assert r.content == upstream_body
    assert str(seen[0].url) == "http://upstream.test/v1/messages?beta=true"
    assert "x-api-key" not in seen[0].headers
    assert "authorization" not in seen[0].headers
    (call,) = sink.calls
    assert (call.session_id, call.agent, call.agent_session_id) == ("sess-1", "claude-code", "cc-uuid")
    assert call.path == "/v1/messages?beta=true"
    assert call.api == "anthropic_messages"
    row = to_row(call, __import__("zstandard").ZstdCompressor())
    assert row["outcome"] == "ok"
    assert row["status_code"] == 200
    assert (row["prompt_tokens"], row["completion_tokens"], row["finish_reason"]) == (3, 1, "end_turn")
    assert json.loads(row["request_json"]) == MSG


async def test_stream_is_relayed_and_assembled():
    events = sse(
        (
            "message_start",
            json.dumps(
                {
                    "type": "message_start",
                    "message": {
                        "id": "m1",
                        "role": "assistant",
                        "content": [],
                        "usage": {"input_tokens": 5, "output_tokens": 1},
                    },
                }
            ),
        ),
        (
            "content_block_start",
            json.dumps(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}},
                }
            ),
        ),
        (
            "content_block_delta",
            json.dumps(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"command": "l'},
                }
            ),
        ),
        (
            "content_block_delta",
            json.dumps(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": 's"}'},
                }
            ),
        ),
        ("content_block_stop", json.dumps({"type": "content_block_stop", "index": 0})),
        (
            "message_delta",
            json.dumps(
                {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}
            ),
        ),
        ("message_delta", json.dumps({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9}})),
        ("message_stop", json.dumps({"type": "message_stop"})),
    )

    def handler(req: httpx.Request) -> httpx.Response:
        return reply(200, events, "text/event-stream")

    async with proxied(handler) as (client, sink):
        r = await client.post("/v1/messages", json={**MSG, "stream": True})
    assert r.content == events
    assert r.headers["content-type"] == "text/event-stream"
    row = to_row(sink.calls[0], __import__("zstandard").ZstdCompressor())
    body = json.loads(row["response_json"])
    assert body["content"][0]["input"] == {"command": "ls"}
    # streamed usage is cumulative: the last value wins, never the sum
    assert row["completion_tokens"] == 9
    assert row["prompt_tokens"] == 5
    assert row["finish_reason"] == "tool_use"
    assert row["stream"] is True


async def test_upstream_key_replaces_client_key_and_client_keys_are_enforced(seen):
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, {"object": "list", "data": []})

    async with proxied(handler, upstream_key="real-secret", client_keys=["k1"]) as (client, sink):
        denied = await client.get("/v1/models", headers={"authorization": "Bearer nope"})
        ok = await client.get("/v1/models", headers={"authorization": "Bearer k1"})
    assert denied.status_code == 401
    assert denied.json()["error"]["type"] == "authentication_error"
    assert ok.status_code == 200
    assert len(seen) == 1
    assert seen[0].headers["authorization"] == "Bearer real-secret"
    assert [c.outcome for c in sink.calls] == ["rejected", "ok"]


async def test_unknown_path_is_404_and_not_forwarded(seen):
    async with proxied(lambda req: seen.append(req) or reply(200, {})) as (client, sink):
        for method, path in [
            ("GET", "/v1/files"),
            ("POST", "/v2/messages"),
            ("GET", "/v1/messages"),
            ("POST", "/s/x/admin"),
        ]:
            r = await client.request(method, path)
            assert r.status_code == 404
            assert "no route" in r.json()["error"]["message"]
    assert seen == []
    assert sink.calls == []


async def test_malformed_requests_get_4xx_in_the_apis_shape(seen):
    cases = [
        ("/v1/messages", b"not json", 400, "anthropic"),
        ("/v1/messages", b"[1,2]", 400, "anthropic"),
        ("/v1/messages", json.dumps({"model": "m", "messages": []}).encode(), 400, "anthropic"),
        ("/v1/messages", json.dumps({**MSG, "max_tokens": "9"}).encode(), 400, "anthropic"),
        ("/v1/messages", json.dumps({**MSG, "stream": "yes"}).encode(), 400, "anthropic"),
        ("/v1/chat/completions", b"{", 400, "openai"),
        ("/v1/chat/completions", json.dumps({"model": "m"}).encode(), 400, "openai"),
        ("/v1/chat/completions", b"\xff\xfe", 400, "openai"),
        ("/v1/responses", json.dumps({"input": "x"}).encode(), 400, "openai"),
        ("/v1/completions", b"x" * 2000, 413, "openai"),
    ]
    async with proxied(lambda req: seen.append(req) or reply(200, {}), max_body_bytes=1000) as (client, sink):
        for path, body, status, family in cases:
            r = await client.post(path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == status, (path, body[:30], r.text)
            err = r.json()
            if family == "anthropic":
                assert err["type"] == "error"
                assert err["error"]["message"]
            else:
                assert err["error"]["message"]
        assert (await client.get("/healthz")).status_code == 200
    assert seen == []
    assert [c.outcome for c in sink.calls] == ["rejected"] * len(cases)
    assert "missing required field 'max_tokens'" in (sink.calls[2].error or "")


async def test_upstream_unreachable_and_timeout():
    def down(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=req)

    def slow(req: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=req)

    async with proxied(down) as (client, sink):
        r = await client.post("/v1/messages", json=MSG)
        assert r.status_code == 502
        assert r.json()["error"]["type"] == "api_error"
    async with proxied(slow) as (client, sink2):
        r = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
        assert r.status_code == 504
        assert r.json()["error"]["type"] == "timeout"
    assert sink.calls[0].outcome == "upstream_error"
    assert sink2.calls[0].outcome == "timeout"


async def test_compressed_request_is_forwarded_unchanged_and_recorded_decoded(seen):
    raw = gzip.compress(json.dumps(MSG).encode())

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, {"content": []})

    async with proxied(handler) as (client, sink):
        r = await client.post("/v1/messages", content=raw, headers={"content-encoding": "gzip"})
    assert r.status_code == 200
    assert seen[0].content == raw
    assert seen[0].headers["content-encoding"] == "gzip"
    assert json.loads(sink.calls[0].request_body) == MSG


async def test_compressed_response_is_relayed_raw_and_recorded_decoded():
    body = {
        "id": "c1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hey"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1},
    }
    packed = gzip.compress(json.dumps(body).encode())

    def handler(req: httpx.Request) -> httpx.Response:
        return reply(200, packed, content_encoding="gzip")

    async with proxied(handler) as (client, sink):
        r = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": []}, headers={"accept-encoding": "gzip"}
        )
    assert r.json() == body  # httpx decodes gzip for us: the bytes arrived gzip-encoded
    row = to_row(sink.calls[0], __import__("zstandard").ZstdCompressor())
    assert json.loads(row["response_json"]) == body
    assert row["response_content_encoding"] == "gzip"


async def test_upstream_drop_mid_stream_ends_with_an_error_event():
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
            raise httpx.RemoteProtocolError("peer closed connection")

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Broken(), headers={"content-type": "text/event-stream"})

    async with proxied(handler) as (client, sink):
        r = await client.post("/v1/chat/completions", json={"model": "m", "messages": [], "stream": True})
    assert r.status_code == 200
    assert r.content.startswith(b'data: {"id":"x"')
    last = r.content.strip().split(b"\n\n")[-1]
    assert json.loads(last.removeprefix(b"data: "))["error"]["type"] == "upstream_error"
    assert sink.calls[0].outcome == "upstream_error"
