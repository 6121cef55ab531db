"""Random bytes, random JSON and random headers on every relayed route (native and chat mode): never a 500,
the proxy stays healthy, every request ends in a record that Arrow can store."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import records
from proxy.parquet import to_row
from proxy.record import OUTCOMES
from proxy.routes import ROUTES
from tests.proxy.asgi_client import asgi_request
from tests.proxy.conftest import anthropic_message, proxied_app, reply, sse

ROUTE_LIST = sorted((r.method, r.path) for r in ROUTES.values())
CHAT_OK = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "yo"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 1},
}
CHAT_STREAM = sse(
    (
        None,
        json.dumps(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}],
            }
        ),
    ),
    (
        None,
        json.dumps(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "m",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
        ),
    ),
    (None, "[DONE]"),
)
MESSAGE = anthropic_message("a", input_tokens=1)
MESSAGE_STREAM = sse(
    ("message_start", json.dumps({"type": "message_start", "message": {**MESSAGE, "content": []}})),
    (
        "content_block_start",
        json.dumps(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        ),
    ),
    (
        "content_block_delta",
        json.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}}),
    ),
    ("content_block_stop", json.dumps({"type": "content_block_stop", "index": 0})),
    ("message_stop", json.dumps({"type": "message_stop"})),
)
RESPONSE = {
    "id": "r",
    "object": "response",
    "status": "completed",
    "output": [],
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def upstream(req: httpx.Request) -> httpx.Response:
    """A well-behaved upstream for whatever the proxy forwards."""
    try:
        body = json.loads(req.content) if req.content else {}
    except ValueError:
        body = {}
    stream = isinstance(body, dict) and body.get("stream") is True
    path = req.url.path
    if path == "/tokenize":
        return reply(200, {"count": 2, "tokens": [1, 2], "max_model_len": 100})
    if path == "/v1/models":
        return reply(200, {"object": "list", "data": [{"id": "m"}]})
    if path == "/v1/messages":
        return reply(200, MESSAGE_STREAM, "text/event-stream") if stream else reply(200, MESSAGE)
    if path == "/v1/messages/count_tokens":
        return reply(200, {"input_tokens": 2})
    if path == "/v1/responses":
        return reply(200, {**RESPONSE})
    return reply(200, CHAT_STREAM, "text/event-stream") if stream else reply(200, CHAT_OK)


# What h11 lets through to the app: visible ASCII, tabs, spaces inside, and obs-text bytes (0x80-0xff).
_VALUE_BYTES = bytes([9, *range(0x20, 0x7F), *range(0x80, 0x100)])
header_values = st.binary(max_size=60).map(
    lambda b: bytes(_VALUE_BYTES[x % len(_VALUE_BYTES)] for x in b).strip()
)
header_names = st.sampled_from(
    [
        b"authorization",
        b"x-api-key",
        b"api-key",
        b"user-agent",
        b"content-encoding",
        b"content-type",
        b"accept-encoding",
        b"x-claude-code-session-id",
        b"session-id",
        b"thread-id",
        b"x-dflash-tag",
        b"content-length",
        b"transfer-encoding",
        b"connection",
        b"anthropic-version",
        b"x-stainless-os",
    ]
) | st.from_regex(rb"\A[a-z][a-z0-9-]{0,15}\Z")
headers = st.lists(st.tuples(header_names, header_values), max_size=6)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=25,
)
content = st.text(max_size=30) | st.lists(
    st.dictionaries(
        st.sampled_from(
            ["type", "text", "id", "name", "input", "content", "tool_use_id", "source", "image_url"]
        ),
        st.sampled_from(
            ["text", "image", "tool_use", "tool_result", "thinking", "input_text", "function_call"]
        )
        | json_values,
        max_size=5,
    ),
    max_size=3,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "developer"]) | st.text(max_size=5)},
    optional={
        "content": content | json_values,
        "tool_calls": json_values,
        "tool_call_id": json_values,
        "type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning"])
        | json_values,
    },
)
# Top-level types right, so the request gets past validation and into the translators with odd insides.
plausible = st.fixed_dictionaries(
    {
        "model": st.text(max_size=10),
        "max_tokens": st.integers(1, 2**31),
        "messages": st.lists(message, max_size=4),
    },
    optional={
        "stream": st.booleans(),
        "input": st.text(max_size=20) | st.lists(message | json_values, max_size=3),
        "prompt": st.text(max_size=10),
        "tools": st.lists(json_values, max_size=3),
        "system": json_values,
        "tool_choice": json_values,
        "instructions": json_values,
        "reasoning": json_values,
        "thinking": json_values,
        "stream_options": json_values,
        "return_token_ids": st.booleans(),
        "metadata": json_values,
    },
)
bodies = (
    st.binary(max_size=300)
    | json_values.map(lambda v: json.dumps(v).encode())
    | plausible.map(lambda v: json.dumps(v).encode())
    | plausible.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))
)
requests_ = st.lists(
    st.tuples(st.sampled_from(ROUTE_LIST), bodies, headers, st.booleans()), min_size=1, max_size=4
)


def storable(call: Any) -> None:
    row = to_row(call, zstandard.ZstdCompressor())
    pa.Table.from_pylist([row], schema=records.SCHEMA)


@pytest.mark.parametrize("upstream_api", ["native", "chat"])
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(batch=requests_)
async def test_no_input_makes_a_500_or_goes_unrecorded(upstream_api: str, batch) -> None:
    async with proxied_app(upstream, upstream_api=upstream_api, max_body_bytes=100_000) as app:
        for (method, path), body, hdrs, session in batch:
            target = f"/s/prop{path}" if session else path
            ex = await asgi_request(app, method, target, [body] if method == "POST" else [], hdrs)
            assert ex.status is not None
            assert ex.status != 500, (method, path, body[:200], hdrs, bytes(ex.body[:300]))
            assert ex.ended
        health = await asgi_request(app, "GET", "/healthz")
        sink = app.state.sink
    assert health.status == 200
    assert len(sink.calls) == len(batch)  # every request on a relayed route: one record
    for call in sink.calls:
        assert call.outcome in OUTCOMES
        assert call.finished_at is not None
        storable(call)
