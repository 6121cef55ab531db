"""Chat Completions stream → OpenAI Responses stream, one upstream chunk at a time."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from wire.common import (
    JSON,
    chat_usage_numbers,
    id_base,
    responses_status,
    responses_usage,
    sse_event,
)
from wire.responses_response import (
    custom_input,
    message_item,
    output_text_part,
    reasoning_item,
    response_object,
    tool_call_item,
)
from wire.responses_tools import responses_tool_map
from wire.stream_base import ChatStreamTranslator, tool_fragment


class _Item:
    """The output item being streamed."""

    __slots__ = ("call_id", "chat_name", "custom", "id", "kind", "output_index", "text")

    def __init__(self, kind: str, item_id: str, output_index: int) -> None:
        self.kind = kind  # reasoning | message | tool
        self.id = item_id
        self.output_index = output_index
        self.text = ""  # reasoning text, message text or raw tool arguments
        self.call_id = ""
        self.chat_name = ""
        self.custom = False


class ResponsesStreamTranslator(ChatStreamTranslator):
    """Feed it the Chat Completions chunks of one streamed call; it returns the Responses SSE bytes to write.

    Events, each with an increasing `sequence_number` from 0: `response.created`, `response.in_progress`;
    per output item `response.output_item.added` … `response.output_item.done`, with, for a message,
    `response.content_part.added`, `response.output_text.delta`*, `response.output_text.done`,
    `response.content_part.done`; for reasoning the same with `response.reasoning_text.*`; for a function
    call `response.function_call_arguments.delta`* and `.done` (freeform tools:
    `response.custom_tool_call_input.delta/done`); at the end `response.completed` (or `response.incomplete`
    when the output hit the token limit) carrying the whole response with usage.

    `feed(chunk)` / `feed_bytes(raw)`, `finish()` on `[DONE]` or a clean end, `error(message)` on an
    upstream failure (`response.failed`); `response` is the response object assembled so far.
    """

    REASONING = "reasoning"
    TEXT = "message"

    def __init__(self, request: Mapping[str, Any] | None = None, *, response_id: str | None = None) -> None:
        super().__init__()
        self._request = dict(request or {})
        self._tools = responses_tool_map(self._request.get("tools"))
        self._response_id = response_id
        self.sequence_number = 0
        self._created_at = int(time.time())
        self._model = str(self._request.get("model") or "")
        self._output: list[JSON] = []  # finished items, in output order
        self._open: _Item | None = None
        self._tool_items: dict[int, _Item] = {}  # chat tool-call index → its item
        self._counts = {"reasoning": 0, "message": 0, "tool": 0}
        self._status = "in_progress"
        self._error: JSON | None = None

    # --- public --------------------------------------------------------------------------------------

    def finish(self) -> bytes:
        """End of the upstream stream: close the open item, then `response.completed` / `.incomplete`."""
        if self.finished:
            return b""
        out: list[bytes] = []
        if not self.started:
            self._begin({}, out)
        self._close_all(out)
        status, incomplete = responses_status(self.finish_reason)
        self._status = status
        response = self._response(incomplete)
        name = "response.completed" if status == "completed" else "response.incomplete"
        out.append(self._event(name, response=response))
        self.finished = True
        return b"".join(out)

    def error(self, message: str, code: str = "server_error") -> bytes:
        """The upstream failed: `response.failed` with the error; the stream must end after it."""
        if self.finished:
            return b""
        out: list[bytes] = []
        if not self.started:
            self._begin({}, out)
        self.finished = True
        self.failed = True
        self._status = "failed"
        self._error = {"code": code, "message": message}
        out.append(self._event("response.failed", response=self._response(None)))
        return b"".join(out)

    @property
    def response(self) -> JSON:
        """The response assembled so far (the `response.completed` payload once finished)."""
        return self._response(
            responses_status(self.finish_reason)[1] if self._status == "incomplete" else None
        )

    # --- internals -----------------------------------------------------------------------------------

    def _event(self, name: str, **fields: Any) -> bytes:
        data = {"type": name, **fields, "sequence_number": self.sequence_number}
        self.sequence_number += 1
        return sse_event(name, data)

    def _part_event(self, name: str, item: _Item, **fields: Any) -> bytes:
        """An event about content part 0 of `item` (every text and reasoning item has exactly one)."""
        return self._event(name, item_id=item.id, output_index=item.output_index, content_index=0, **fields)

    def _response(self, incomplete: JSON | None) -> JSON:
        usage = None
        if self.finished or self._status != "in_progress":
            prompt, completion, cached, reasoning = chat_usage_numbers(self.usage)
            prompt = prompt or len(self.ids.prompt_token_ids or [])
            completion = completion or len(self.ids.completion_token_ids or [])
            usage = responses_usage(prompt, completion, cached, reasoning)
        return response_object(
            self._request,
            response_id=self._response_id or f"resp_{id_base(self._chat_id)}",
            created_at=self._created_at,
            model=self._model,
            status=self._status,
            output=[dict(item) for item in self._output if item],
            usage=usage,
            incomplete_details=incomplete,
            error=self._error,
        )

    def _begin(self, chunk: Mapping[str, Any], out: list[bytes]) -> None:
        self.started = True
        self._chat_id = chunk.get("id")
        if self._response_id is None:
            self._response_id = f"resp_{id_base(self._chat_id)}"
        if isinstance(chunk.get("created"), int):
            self._created_at = chunk["created"]
        if not self._model:
            self._model = str(chunk.get("model") or "")
        out.append(self._event("response.created", response=self._response(None)))
        out.append(self._event("response.in_progress", response=self._response(None)))

    def _new_id(self, kind: str) -> str:
        prefix = {"reasoning": "rs", "message": "msg", "tool": "fc"}[kind]
        n = self._counts[kind]
        self._counts[kind] += 1
        base = id_base(self._chat_id)
        return f"{prefix}_{base}" if n == 0 and kind != "tool" else f"{prefix}_{base}_{n}"

    def _finish_choice(self, choice: Mapping[str, Any], out: list[bytes]) -> None:
        self.finish_reason = choice["finish_reason"]
        self._close_all(out)

    def _open_item(self, kind: str, out: list[bytes]) -> _Item:
        self._close(out)
        item = _Item(kind, self._new_id(kind), len(self._output))
        self._output.append({})  # placeholder until the item is done
        self._open = item
        if kind == "message":
            out.append(
                self._event(
                    "response.output_item.added",
                    output_index=item.output_index,
                    item=message_item(item.id, "", "in_progress"),
                )
            )
            out.append(
                self._part_event(
                    "response.content_part.added",
                    item,
                    part=output_text_part(""),
                )
            )
        elif kind == "reasoning":
            out.append(
                self._event(
                    "response.output_item.added",
                    output_index=item.output_index,
                    item=reasoning_item(item.id, None),
                )
            )
            out.append(
                self._part_event(
                    "response.content_part.added",
                    item,
                    part={"type": "reasoning_text", "text": ""},
                )
            )
        return item

    def _text_delta(self, kind: str, text: str, out: list[bytes]) -> None:
        item = (
            self._open if self._open is not None and self._open.kind == kind else self._open_item(kind, out)
        )
        item.text += text
        if kind == "message":
            out.append(
                self._part_event(
                    "response.output_text.delta",
                    item,
                    delta=text,
                    logprobs=[],
                )
            )
        else:
            out.append(
                self._part_event(
                    "response.reasoning_text.delta",
                    item,
                    delta=text,
                )
            )

    def _tool_delta(self, call: Mapping[str, Any], position: int, out: list[bytes]) -> None:
        index, fragment = tool_fragment(call, position)
        if index in self._tool_items:
            item = self._tool_items[index]
            if item is not self._open:
                self._anomaly("tool-call arguments arrived after their item was done; they are lost")
                return
            self._args_delta(item, fragment, out)
            return
        self._hold_tool(index, call, fragment, out)

    def _start_tool(self, index: int, out: list[bytes]) -> None:
        pending = self._pending_tools.pop(index)
        item = self._open_item("tool", out)
        item.chat_name = pending["name"]
        item.call_id = pending["id"] or f"call_{id_base(self._chat_id)}_{index}"
        item.custom = item.chat_name in self._tools.custom
        if item.custom:
            item.id = "ctc_" + item.id[len("fc_") :]
        self._tool_items[index] = item
        added = tool_call_item(item.id, item.call_id, item.chat_name, "", "in_progress", self._tools)
        out.append(self._event("response.output_item.added", output_index=item.output_index, item=added))
        self._args_delta(item, pending["arguments"], out)

    def _args_delta(self, item: _Item, fragment: str, out: list[bytes]) -> None:
        if not fragment:
            return
        item.text += fragment
        if not item.custom:  # a freeform tool's input is only known once its JSON wrapper is complete
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item.id,
                    output_index=item.output_index,
                    delta=fragment,
                )
            )

    def _close_all(self, out: list[bytes]) -> None:
        for index in sorted(self._pending_tools):
            self._start_tool(index, out)
        self._close(out)

    def _close(self, out: list[bytes]) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        ids = {"item_id": item.id, "output_index": item.output_index}
        if item.kind == "message":
            status, _ = responses_status(self.finish_reason)
            done = message_item(item.id, item.text, "incomplete" if status == "incomplete" else "completed")
            out.append(
                self._event("response.output_text.done", **ids, content_index=0, text=item.text, logprobs=[])
            )
            out.append(
                self._event(
                    "response.content_part.done", **ids, content_index=0, part=output_text_part(item.text)
                )
            )
        elif item.kind == "reasoning":
            done = reasoning_item(item.id, item.text)
            out.append(self._event("response.reasoning_text.done", **ids, content_index=0, text=item.text))
            part = {"type": "reasoning_text", "text": item.text}
            out.append(self._event("response.content_part.done", **ids, content_index=0, part=part))
        else:
            done = tool_call_item(item.id, item.call_id, item.chat_name, item.text, "completed", self._tools)
            if item.custom:
                text = custom_input(item.text)
                if text:
                    out.append(self._event("response.custom_tool_call_input.delta", **ids, delta=text))
                out.append(self._event("response.custom_tool_call_input.done", **ids, input=text))
            else:
                out.append(self._event("response.function_call_arguments.done", **ids, arguments=item.text))
        self._output[item.output_index] = done
        out.append(self._event("response.output_item.done", output_index=item.output_index, item=done))
