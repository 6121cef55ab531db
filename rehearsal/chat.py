"""A turn as vLLM's Chat Completions answers it, whole or streamed, with `return_token_ids`: top-level
`prompt_token_ids` (on the first chunk when streaming) and each choice's `token_ids` (the chunk's new ids)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from rehearsal.policy import Turn
from rehearsal.tokenizer import encode, tool_call_ids

DONE = b"data: [DONE]\n\n"
_PIECES = 6  # a turn's text streams in about this many deltas


def _tool_ids(turn: Turn) -> list[int]:
    return [] if turn.tool is None else tool_call_ids(turn.tool, turn.arguments)


def completion_ids(turn: Turn) -> list[int]:
    return encode(turn.text) + _tool_ids(turn)


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _tool_calls(turn: Turn, call_id: str) -> list[dict[str, Any]]:
    fn = {"name": turn.tool, "arguments": turn.arguments_json}
    return [{"id": call_id, "type": "function", "function": fn}]


def envelope(
    kind: str, id_prefix: str, model: str, choice: dict[str, Any], prompt: list[int], completion: list[int]
) -> dict[str, Any]:
    """A whole (unstreamed) OpenAI answer around its one choice: `kind` is its `object`."""
    return {
        "id": f"{id_prefix}{uuid.uuid4().hex[:24]}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(len(prompt), len(completion)),
    }


def whole_message(
    message: dict[str, Any], finish: str, body: dict[str, Any], model: str, prompt: list[int], ids: list[int]
) -> dict[str, Any]:
    """A whole chat completion of `message`, with vLLM's token ids when the request asks for them."""
    choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    out = envelope("chat.completion", "chatcmpl-", model, choice, prompt, ids)
    if body.get("return_token_ids"):
        out["prompt_token_ids"] = prompt
        choice["token_ids"] = ids
    return out


def whole(turn: Turn, body: dict[str, Any], model: str, prompt: list[int]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool:
        message["tool_calls"] = _tool_calls(turn, f"call_{uuid.uuid4().hex[:24]}")
    finish = "tool_calls" if turn.tool else "stop"
    return whole_message(message, finish, body, model, prompt, completion_ids(turn))


class _Lines:
    def __init__(self, body: dict[str, Any], model: str) -> None:
        self.head = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self.ids = bool(body.get("return_token_ids"))

    def line(
        self, delta: dict[str, Any] | None, ids: list[int], finish: str | None = None, **top: Any
    ) -> bytes:
        choices: list[dict[str, Any]] = []
        if delta is not None:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if self.ids:
                choice["token_ids"] = ids
            choices.append(choice)
        data = {**self.head, "choices": choices, **top}
        return b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def _text_pieces(text: str) -> list[str]:
    words = text.split(" ")
    step = max(1, len(words) // _PIECES)
    return [
        " ".join(words[i : i + step]) + (" " if i + step < len(words) else "")
        for i in range(0, len(words), step)
    ]


def stream(turn: Turn, body: dict[str, Any], model: str, prompt: list[int]) -> Iterator[tuple[bytes, int]]:
    """SSE lines, each with the number of tokens it carries (the server paces them)."""
    lines = _Lines(body, model)
    top = {"prompt_token_ids": prompt} if lines.ids else {}
    yield lines.line({"role": "assistant", "content": ""}, [], None, **top), 0
    n = 0
    for piece in _text_pieces(turn.text) if turn.text else []:
        ids = encode(piece)
        n += len(ids)
        yield lines.line({"content": piece}, ids), len(ids)
    if turn.tool:
        call = _tool_calls(turn, f"call_{uuid.uuid4().hex[:24]}")[0]
        head = {
            "index": 0,
            "id": call["id"],
            "type": "function",
            "function": {"name": turn.tool, "arguments": ""},
        }
        ids = _tool_ids(turn)
        n += len(ids)
        yield lines.line({"tool_calls": [head]}, ids[:1]), 1
        args = turn.arguments_json
        half = len(args) // 2
        yield (
            lines.line({"tool_calls": [{"index": 0, "function": {"arguments": args[:half]}}]}, ids[1:-1]),
            len(ids) - 2,
        )
        yield lines.line({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}, ids[-1:]), 1
    yield lines.line({}, [], "tool_calls" if turn.tool else "stop"), 0
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        yield lines.line(None, [], usage=usage(len(prompt), n)), 0
    yield DONE, 0
