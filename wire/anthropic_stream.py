"""Chat Completions stream → Anthropic Messages stream, one upstream chunk at a time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wire.anthropic_response import thinking_signature
from wire.common import (
    JSON,
    anthropic_stop_reason,
    anthropic_usage,
    chat_usage_numbers,
    id_base,
    parse_arguments,
    sse_event,
)
from wire.stream_base import ChatStreamTranslator, tool_fragment


class AnthropicStreamTranslator(ChatStreamTranslator):
    """Feed it the Chat Completions chunks of one streamed call; it returns the Anthropic SSE bytes to write.

    Event order: `message_start`, `ping`, then per content block `content_block_start`, its deltas
    (`thinking_delta` + `signature_delta`, `text_delta`, `input_json_delta`) and `content_block_stop`, one
    block per tool call; at the end `message_delta` (stop reason, cumulative usage) and `message_stop`.

    - `feed(chunk)` for each parsed chunk dict; `feed_bytes(raw)` parses raw upstream bytes itself.
    - `finish()` on `data: [DONE]` or a clean end of the upstream stream (idempotent).
    - `error(message)` when the upstream fails mid-stream: Anthropic's `error` event, nothing after it.
    - `message` is the response assembled so far in the non-streaming shape; `prompt_token_ids`,
      `completion_token_ids`, `finish_reason` and `usage` are what the upstream reported.
    """

    REASONING = "thinking"
    TEXT = "text"

    def __init__(self, request: Mapping[str, Any] | None = None, *, message_id: str | None = None) -> None:
        super().__init__()
        self._model = (request or {}).get("model")
        self._message_id = message_id
        self._blocks: list[JSON] = []
        self._tool_args: dict[int, str] = {}  # block index → raw JSON arguments
        self._open: int | None = None  # index of the open block
        self._tool_block: dict[int, int] = {}  # chat tool-call index → block index
        # chat tool-call index → {id, name, arguments} of a call whose name has not arrived yet
        self._vllm_stop_reason: Any = None
        self._stop: tuple[str | None, str | None] = (None, None)

    # --- public --------------------------------------------------------------------------------------

    def finish(self) -> bytes:
        """End of the upstream stream: close the open block, then `message_delta` and `message_stop`."""
        if self.finished:
            return b""
        out: list[bytes] = []
        if not self.started:
            out.append(self._message_start({}))
        for index in sorted(self._pending_tools):
            self._start_tool(index, out)
        self._close(out)
        has_tools = any(b["type"] == "tool_use" for b in self._blocks)
        stop_reason, stop_sequence = anthropic_stop_reason(
            self.finish_reason, self._vllm_stop_reason, has_tools
        )
        self._stop = (stop_reason, stop_sequence)
        out.append(
            sse_event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": self._usage(),
                },
            )
        )
        out.append(sse_event("message_stop", {"type": "message_stop"}))
        self.finished = True
        return b"".join(out)

    def error(self, message: str, error_type: str = "api_error") -> bytes:
        """The upstream failed: Anthropic's `error` event; the stream must end after it."""
        if self.finished:
            return b""
        self.finished = True
        self.failed = True
        return sse_event("error", {"type": "error", "error": {"type": error_type, "message": message}})

    @staticmethod
    def ping() -> bytes:
        return sse_event("ping", {"type": "ping"})

    @property
    def message(self) -> JSON:
        """The message assembled so far, in the non-streaming Messages shape."""
        content: list[JSON] = []
        for index, block in enumerate(self._blocks):
            if block["type"] == "tool_use":
                block = {**block, "input": parse_arguments(self._tool_args.get(index, ""))}
            content.append(dict(block))
        stop = self._stop
        return {
            "id": self._id(),
            "type": "message",
            "role": "assistant",
            "model": self._model or "",
            "content": content,
            "stop_reason": stop[0],
            "stop_sequence": stop[1],
            "usage": self._usage(),
        }

    # --- internals -----------------------------------------------------------------------------------

    def _begin(self, chunk: Mapping[str, Any], out: list[bytes]) -> None:
        self._chat_id = chunk.get("id")
        out.append(self._message_start(chunk))

    def _id(self) -> str:
        return self._message_id or f"msg_{id_base(self._chat_id)}"

    def _message_start(self, chunk: Mapping[str, Any]) -> bytes:
        self.started = True
        if not self._model:
            self._model = chunk.get("model") or ""
        prompt = len(self.ids.prompt_token_ids or [])
        if not prompt and isinstance(chunk.get("usage"), Mapping):
            prompt = chat_usage_numbers(chunk["usage"])[0]
        message: JSON = {
            "id": self._id(),
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": anthropic_usage(prompt, 0),
        }
        return sse_event("message_start", {"type": "message_start", "message": message}) + self.ping()

    def _usage(self) -> JSON:
        prompt, completion, cached, _ = chat_usage_numbers(self.usage)
        if not prompt:
            prompt = len(self.ids.prompt_token_ids or [])
        if not completion:
            completion = len(self.ids.completion_token_ids or [])
        return anthropic_usage(prompt, completion, cached)

    def _finish_choice(self, choice: Mapping[str, Any], out: list[bytes]) -> None:
        self.finish_reason = choice["finish_reason"]
        self._vllm_stop_reason = choice.get("stop_reason")
        for index in sorted(self._pending_tools):
            self._start_tool(index, out)
        self._close(out)

    def _text_delta(self, kind: str, text: str, out: list[bytes]) -> None:
        if self._open is None or self._blocks[self._open]["type"] != kind:
            if kind == "thinking":
                self._start({"type": "thinking", "thinking": "", "signature": ""}, out)
            else:
                self._start({"type": "text", "text": ""}, out)
        index = self._open
        assert index is not None
        self._blocks[index][kind] += text
        delta = (
            {"type": "thinking_delta", "thinking": text}
            if kind == "thinking"
            else {"type": "text_delta", "text": text}
        )
        out.append(
            sse_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )

    def _tool_delta(self, call: Mapping[str, Any], position: int, out: list[bytes]) -> None:
        index, fragment = tool_fragment(call, position)
        if index in self._tool_block:
            block = self._tool_block[index]
            if block != self._open:
                self._anomaly("tool-call arguments arrived after their block was closed")
            self._args_delta(block, fragment, out)
            return
        self._hold_tool(index, call, fragment, out)

    def _start_tool(self, index: int, out: list[bytes]) -> None:
        pending = self._pending_tools.pop(index)
        call_id = pending["id"] or f"toolu_{id_base(self._chat_id)}_{index}"
        block = self._start({"type": "tool_use", "id": call_id, "name": pending["name"], "input": {}}, out)
        self._tool_block[index] = block
        self._tool_args[block] = ""
        if pending["arguments"]:
            self._args_delta(block, pending["arguments"], out)

    def _args_delta(self, block: int, fragment: str, out: list[bytes]) -> None:
        if not fragment:
            return
        self._tool_args[block] += fragment
        delta = {"type": "input_json_delta", "partial_json": fragment}
        out.append(
            sse_event("content_block_delta", {"type": "content_block_delta", "index": block, "delta": delta})
        )

    def _start(self, block: JSON, out: list[bytes]) -> int:
        self._close(out)
        index = len(self._blocks)
        self._blocks.append(dict(block))
        self._open = index
        out.append(
            sse_event(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            )
        )
        return index

    def _close(self, out: list[bytes]) -> None:
        index = self._open
        if index is None:
            return
        self._open = None
        if self._blocks[index]["type"] == "thinking":
            signature = thinking_signature()
            self._blocks[index]["signature"] = signature
            delta = {"type": "signature_delta", "signature": signature}
            out.append(
                sse_event(
                    "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                )
            )
        out.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
