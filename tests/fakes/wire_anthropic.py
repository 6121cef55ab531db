"""Anthropic Messages wire format for the scripted upstream (non-streaming body and SSE events)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.fakes.scripted_policy import Reply, count_text_tokens, encode, new_id

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def has_tool_result(body: dict[str, Any]) -> bool:
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return True
    return False


def input_tokens(body: dict[str, Any]) -> int:
    return count_text_tokens([body.get("system"), body.get("messages"), body.get("tools")])


def _usage(body: dict[str, Any], output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens(body),
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _output_tokens(reply: Reply) -> int:
    if reply.tool_call:
        return len(encode(reply.tool_call.arguments_json))
    return len(encode(reply.text))


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.tool_call else "end_turn"


def full_response(reply: Reply, body: dict[str, Any], model: str) -> dict[str, Any]:
    content: list[dict[str, Any]]
    if reply.tool_call:
        call = reply.tool_call
        content = [{"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.arguments}]
    else:
        content = [{"type": "text", "text": reply.text}]
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": _usage(body, _output_tokens(reply)),
    }


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def stream_events(reply: Reply, body: dict[str, Any], model: str) -> Iterator[bytes]:
    """message_start, ping, one content block (text or tool_use), message_delta, message_stop."""
    message = full_response(reply, body, model)
    start = {**message, "content": [], "stop_reason": None, "usage": _usage(body, 1)}
    yield sse("message_start", {"type": "message_start", "message": start})
    yield sse("ping", {"type": "ping"})
    if reply.tool_call:
        call = reply.tool_call
        block = {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}
        yield sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        args = call.arguments_json
        for piece in (args[: len(args) // 2], args[len(args) // 2 :]):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    else:
        block = {"type": "text", "text": ""}
        yield sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        text_delta = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}\n\n'
        for piece in reply.text_deltas:
            yield text_delta % json.dumps(piece).encode()
    yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    # Anthropic's streamed usage is cumulative: message_delta repeats the totals so far.
    end: dict[str, Any] = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
    yield sse("message_delta", {"type": "message_delta", "delta": end, "usage": message["usage"]})
    yield sse("message_stop", {"type": "message_stop"})


def models_body(model_ids: list[str]) -> dict[str, Any]:
    data = [
        {"type": "model", "id": m, "display_name": m, "created_at": "2026-01-01T00:00:00Z"} for m in model_ids
    ]
    return {"data": data, "has_more": False, "first_id": model_ids[0], "last_id": model_ids[-1]}
