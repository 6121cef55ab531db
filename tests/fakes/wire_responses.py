"""OpenAI Responses wire format for the scripted upstream: response objects and numbered SSE events."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from tests.fakes.scripted_policy import Reply, count_text_tokens, encode, new_id

TOOL_OUTPUT_TYPES = {
    "function_call_output",
    "local_shell_call_output",
    "custom_tool_call_output",
    "shell_call_output",
    "computer_call_output",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}


def has_tool_result(body: dict[str, Any]) -> bool:
    items = body.get("input")
    if not isinstance(items, list):
        return False
    return any(isinstance(i, dict) and i.get("type") in TOOL_OUTPUT_TYPES for i in items)


def _usage(body: dict[str, Any], output_tokens: int) -> dict[str, Any]:
    n_in = count_text_tokens([body.get("instructions"), body.get("input"), body.get("tools")])
    return {
        "input_tokens": n_in,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": n_in + output_tokens,
    }


def _output_item(reply: Reply) -> dict[str, Any]:
    call = reply.tool_call
    if call is None:
        content = [{"type": "output_text", "text": reply.text, "annotations": []}]
        return {
            "type": "message",
            "id": new_id("msg_"),
            "status": "completed",
            "role": "assistant",
            "content": content,
        }
    if call.kind == "local_shell":
        action = {**call.arguments, "env": {}}
        return {
            "type": "local_shell_call",
            "id": new_id("lsh_"),
            "call_id": call.call_id,
            "action": action,
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": new_id("fc_"),
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments_json,
        "status": "completed",
    }


def _response(body: dict[str, Any], model: str, status: str, output: list[Any], usage: Any) -> dict[str, Any]:
    return {
        "id": "",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "previous_response_id": body.get("previous_response_id"),
        "store": bool(body.get("store", False)),
    }


def _output_tokens(reply: Reply) -> int:
    return len(encode(reply.tool_call.arguments_json if reply.tool_call else reply.text))


def full_response(reply: Reply, body: dict[str, Any], model: str) -> dict[str, Any]:
    result = _response(body, model, "completed", [_output_item(reply)], _usage(body, _output_tokens(reply)))
    result["id"] = new_id("resp_")
    return result


class _Events:
    """Serialises events with their ``type`` and a running ``sequence_number``."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def stream_events(reply: Reply, body: dict[str, Any], model: str) -> Iterator[bytes]:
    ev = _Events()
    base = _response(body, model, "in_progress", [], None)
    base["id"] = new_id("resp_")
    yield ev("response.created", response=base)
    yield ev("response.in_progress", response=base)
    item = _output_item(reply)
    item_id = item["id"]
    if item["type"] == "message":
        yield ev(
            "response.output_item.added",
            output_index=0,
            item={**item, "status": "in_progress", "content": []},
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        at = {"item_id": item_id, "output_index": 0, "content_index": 0}
        yield ev("response.content_part.added", **at, part=part)
        for piece in reply.text_deltas:
            yield ev("response.output_text.delta", **at, delta=piece, logprobs=[])
        yield ev("response.output_text.done", **at, text=reply.text, logprobs=[])
        yield ev("response.content_part.done", **at, part={**part, "text": reply.text})
    elif item["type"] == "function_call":
        yield ev(
            "response.output_item.added",
            output_index=0,
            item={**item, "arguments": "", "status": "in_progress"},
        )
        args = item["arguments"]
        at = {"item_id": item_id, "output_index": 0}
        for piece in (args[: len(args) // 2], args[len(args) // 2 :]):
            yield ev("response.function_call_arguments.delta", **at, delta=piece)
        yield ev("response.function_call_arguments.done", **at, arguments=args)
    else:
        yield ev("response.output_item.added", output_index=0, item={**item, "status": "in_progress"})
    yield ev("response.output_item.done", output_index=0, item=item)
    done = {**base, "status": "completed", "output": [item], "usage": _usage(body, _output_tokens(reply))}
    yield ev("response.completed", response=done)
