"""OpenAI Chat Completions and legacy Completions wire formats, with vLLM's ``return_token_ids``.

With ``return_token_ids: true`` vLLM's chat adds top-level ``prompt_token_ids`` (first chunk when streaming)
and a per-choice ``token_ids`` list (the new ids of that chunk when streaming); its legacy completions put
both lists on the choice (``prompt_token_ids`` on the first chunk only). The byte tokenizer of
``scripted_policy`` produces the ids, so ``/tokenize`` on the same messages gives the same prompt ids. A whole
answer is wrapped the way the scripted brain wraps its own (``rehearsal.chat``): one envelope for both fakes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from rehearsal.chat import envelope, usage, whole_message
from tests.fakes.scripted_policy import Reply, encode, new_id, render_chat

DONE = b"data: [DONE]\n\n"


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 429:
        kind = "rate_limit_exceeded"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def has_tool_result(body: dict[str, Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in body.get("messages") or [])


def prompt_ids(body: dict[str, Any]) -> list[int]:
    return encode(render_chat(body.get("messages") or [], body.get("tools")))


def _finish(reply: Reply) -> str:
    return "tool_calls" if reply.tool_call else "stop"


def _completion_ids(reply: Reply) -> list[int]:
    if reply.tool_call:
        return encode(reply.tool_call.arguments_json)
    return encode(reply.text)


def full_response(reply: Reply, body: dict[str, Any], model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if reply.tool_call else reply.text}
    if reply.tool_call:
        call = reply.tool_call
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
        ]
    return whole_message(message, _finish(reply), body, model, prompt_ids(body), _completion_ids(reply))


class _Chunker:
    """Builds chunk lines sharing one id/created/model; serialises with compact separators."""

    def __init__(self, body: dict[str, Any], model: str, obj: str) -> None:
        self.head = {"id": new_id("chatcmpl-"), "object": obj, "created": int(time.time()), "model": model}
        self.with_ids = bool(body.get("return_token_ids"))

    def line(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        data = {**self.head, "choices": choices, **extra}
        return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def stream_events(reply: Reply, body: dict[str, Any], model: str) -> Iterator[bytes]:
    chunker = _Chunker(body, model, "chat.completion.chunk")
    ids = prompt_ids(body)
    first: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    extra: dict[str, Any] = {}
    if chunker.with_ids:
        first["token_ids"] = []
        extra["prompt_token_ids"] = ids
    yield chunker.line([first], **extra)
    n_completion = 0
    for delta, piece_ids in _deltas(reply):
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        if chunker.with_ids:
            choice["token_ids"] = piece_ids
        n_completion += len(piece_ids)
        yield chunker.line([choice])
    last: dict[str, Any] = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": _finish(reply)}
    if chunker.with_ids:
        last["token_ids"] = []
    yield chunker.line([last])
    options = body.get("stream_options") or {}
    if isinstance(options, dict) and options.get("include_usage"):
        yield chunker.line([], usage=usage(len(ids), n_completion))
    yield DONE


def _deltas(reply: Reply) -> Iterator[tuple[dict[str, Any], list[int]]]:
    if reply.tool_call:
        call = reply.tool_call
        head = {
            "index": 0,
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        yield {"tool_calls": [head]}, []
        args = call.arguments_json
        for piece in (args[: len(args) // 2], args[len(args) // 2 :]):
            yield {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, encode(piece)
        return
    for piece in reply.text_deltas:
        yield {"content": piece}, encode(piece)


def bench_stream(chunks: int, body: dict[str, Any], model: str) -> Iterator[bytes]:
    """The fastest faithful chat stream: one pre-encoded delta line repeated ``chunks`` times."""
    chunker = _Chunker(body, model, "chat.completion.chunk")
    yield chunker.line([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    piece = chunker.line([{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}])
    for _ in range(chunks):
        yield piece
    yield chunker.line([{"index": 0, "delta": {}, "finish_reason": "stop"}])
    options = body.get("stream_options") or {}
    if isinstance(options, dict) and options.get("include_usage"):
        yield chunker.line([], usage=usage(len(prompt_ids(body)), chunks))
    yield DONE


# --- legacy /v1/completions ----------------------------------------------------------------------------


def completion_prompt_ids(body: dict[str, Any]) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        return [int(t) for t in prompt]
    return encode(prompt if isinstance(prompt, str) else json.dumps(prompt))


def completion_full(reply: Reply, body: dict[str, Any], model: str) -> dict[str, Any]:
    ids = completion_prompt_ids(body)
    choice: dict[str, Any] = {"index": 0, "text": reply.text, "logprobs": None, "finish_reason": "stop"}
    result = envelope("text_completion", "cmpl-", model, choice, ids, encode(reply.text))
    if body.get("return_token_ids"):  # vLLM's completions put both lists on the choice
        choice["prompt_token_ids"] = ids
        choice["token_ids"] = encode(reply.text)
    return result


def completion_stream(reply: Reply, body: dict[str, Any], model: str) -> Iterator[bytes]:
    chunker = _Chunker(body, model, "text_completion")
    ids = completion_prompt_ids(body)
    for i, piece in enumerate(reply.text_deltas):
        choice: dict[str, Any] = {"index": 0, "text": piece, "logprobs": None, "finish_reason": None}
        if chunker.with_ids:
            choice["prompt_token_ids"] = ids if i == 0 else None
            choice["token_ids"] = encode(piece)
        yield chunker.line([choice])
    yield chunker.line([{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}])
    options = body.get("stream_options") or {}
    if isinstance(options, dict) and options.get("include_usage"):
        yield chunker.line([], usage=usage(len(ids), len(encode(reply.text))))
    yield DONE
