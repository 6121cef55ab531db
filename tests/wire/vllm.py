"""Realistic vLLM Chat Completions chunk sequences and SSE parsing helpers for the translation tests.

The shapes follow vLLM's serving code with `return_token_ids: true` and `stream_options.include_usage`:
the first chunk carries the role, an empty content and `prompt_token_ids`; every chunk's choice carries its
new `token_ids`; the finish chunk has an empty delta; a final chunk has `choices: []` and the usage.
"""

from __future__ import annotations

import json
from typing import Any

CHAT_ID = "chatcmpl-9f1c2e"
CREATED = 1_764_000_000
MODEL = "Qwen/Qwen3-8B"
PROMPT_IDS = [151644, 8948, 198, 2610, 525, 264]


class Stream:
    """Builds one streamed chat completion chunk by chunk; `next_id` numbers the completion tokens."""

    def __init__(self, *, token_ids: bool = True, reasoning_key: str = "reasoning") -> None:
        self.token_ids = token_ids
        self.reasoning_key = reasoning_key
        self.chunks: list[dict[str, Any]] = []
        self.next_id = 1000
        self.completion_ids: list[int] = []

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> None:
        self.chunks.append(
            {
                "id": CHAT_ID,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": MODEL,
                "choices": choices,
                **extra,
            }
        )

    def _choice(self, delta: dict[str, Any], n_tokens: int, **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": None,
            **extra,
        }
        if self.token_ids:
            ids = list(range(self.next_id, self.next_id + n_tokens))
            self.next_id += n_tokens
            self.completion_ids += ids
            choice["token_ids"] = ids
        return choice

    def role(self) -> Stream:
        extra = {"prompt_token_ids": PROMPT_IDS} if self.token_ids else {}
        self._chunk([self._choice({"role": "assistant", "content": ""}, 0)], **extra)
        return self

    def reasoning(self, *pieces: str) -> Stream:
        for piece in pieces:
            self._chunk([self._choice({self.reasoning_key: piece}, 1)])
        return self

    def text(self, *pieces: str) -> Stream:
        for piece in pieces:
            self._chunk([self._choice({"content": piece}, 1)])
        return self

    def tool(self, index: int, call_id: str, name: str, *fragments: str) -> Stream:
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        self._chunk([self._choice({"tool_calls": [head]}, 1)])
        for fragment in fragments:
            self._chunk(
                [self._choice({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}, 1)]
            )
        return self

    def finish(self, reason: str, stop_reason: Any = None) -> Stream:
        self._chunk([self._choice({}, 1, stop_reason=stop_reason) | {"finish_reason": reason}])
        return self

    def usage(self, prompt: int | None = None, cached: int = 0) -> Stream:
        prompt = len(PROMPT_IDS) if prompt is None else prompt
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": len(self.completion_ids),
            "total_tokens": prompt + len(self.completion_ids),
        }
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        self._chunk([], usage=usage)
        return self

    def sse(self) -> bytes:
        body = b"".join(
            b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in self.chunks
        )
        return body + b"data: [DONE]\n\n"


def run(translator: Any, stream: Stream) -> bytes:
    """Feed every chunk, then finish (as the relay does on `data: [DONE]`)."""
    out = b"".join(translator.feed(chunk) for chunk in stream.chunks)
    return out + translator.finish()


def parse_sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of every event; asserts the framing is exactly `event: X\\ndata: {...}\\n\\n`."""
    text = data.decode()
    assert text.endswith("\n\n") or not text
    events = []
    for block in text.split("\n\n")[:-1]:
        lines = block.split("\n")
        assert len(lines) == 2, block
        assert lines[0].startswith("event: "), block
        assert lines[1].startswith("data: "), block
        name, payload = lines[0][7:], json.loads(lines[1][6:])
        assert payload["type"] == name
        events.append((name, payload))
    return events


def chat_response(message: dict[str, Any], finish_reason: str = "stop", **extra: Any) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": {"role": "assistant", **message},
        "logprobs": None,
        "finish_reason": finish_reason,
    }
    choice.update(extra.pop("choice", {}))
    return {
        "id": CHAT_ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [choice],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
        **extra,
    }


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """One entry of a chat message's `tool_calls`."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
