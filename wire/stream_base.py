"""What the two stream translators share: reading upstream Chat Completions chunks, collecting token ids
and usage, and handing choice 0 of each chunk to the subclass, which writes its own API's events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wire.common import JSON, reasoning_of
from wire.sse import DONE, SSEDecoder
from wire.token_ids import TokenIdCollector


def tool_fragment(call: Mapping[str, Any], position: int) -> tuple[int, str]:
    """(the tool call's index, the argument text this chunk carries) of one `delta.tool_calls` entry."""
    function = call.get("function") or {}
    fragment = function.get("arguments") if isinstance(function, Mapping) else None
    return call.get("index", position), fragment if isinstance(fragment, str) else ""


class ChatStreamTranslator:
    # the subclass's names for a reasoning block and an answer-text block
    REASONING = "reasoning"
    TEXT = "text"

    def __init__(self) -> None:
        self._decoder: SSEDecoder | None = None
        self.ids = TokenIdCollector()
        self.started = False
        self.finished = False
        self.failed = False
        self._chat_id: Any = None
        self.finish_reason: str | None = None
        self.usage: JSON | None = None
        self.anomalies: list[str] = []
        self._pending_tools: dict[int, dict[str, Any]] = {}  # tool calls whose name has not arrived yet

    @property
    def prompt_token_ids(self) -> list[int] | None:
        return self.ids.prompt_token_ids

    @property
    def completion_token_ids(self) -> list[int] | None:
        return self.ids.completion_token_ids

    def feed_bytes(self, raw: bytes) -> bytes:
        """Raw upstream SSE bytes in, the client API's SSE bytes out (handles `[DONE]`)."""
        if self._decoder is None:
            self._decoder = SSEDecoder()
        return self._feed_items(self._decoder.feed(raw))

    def end_bytes(self) -> bytes:
        """The upstream byte stream ended cleanly: flush the parser, then `finish()`."""
        out = self._feed_items(self._decoder.flush()) if self._decoder is not None else b""
        return out + self.finish()

    def feed(self, chunk: Mapping[str, Any]) -> bytes:
        if self.finished:
            return b""
        if ("error" in chunk and "choices" not in chunk) or chunk.get("object") == "error":
            err = chunk.get("error")
            message = err.get("message") if isinstance(err, Mapping) else (err or chunk.get("message"))
            return self.error(str(message or "upstream error"))
        self.ids.collect(chunk)
        out: list[bytes] = []
        if not self.started:
            self._begin(chunk, out)
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = dict(chunk["usage"])
        for position, choice in enumerate(chunk.get("choices") or []):
            if not isinstance(choice, Mapping):
                continue
            if choice.get("index", position) != 0:
                self._anomaly("choice other than 0 ignored")
                continue
            self._choice(choice, out)
        return b"".join(out)

    # --- what each API writes ------------------------------------------------------------------------

    def finish(self) -> bytes:
        """End of the upstream stream: close what is open and write the API's closing events."""
        raise NotImplementedError

    def error(self, message: str) -> bytes:
        """The upstream failed: the API's error event; the stream must end after it."""
        raise NotImplementedError

    def _begin(self, chunk: Mapping[str, Any], out: list[bytes]) -> None:
        """The first chunk arrived: write the API's opening events."""
        raise NotImplementedError

    def _text_delta(self, kind: str, text: str, out: list[bytes]) -> None:
        """Append reasoning (kind `REASONING`) or answer text (kind `TEXT`) to the open block or item."""
        raise NotImplementedError

    def _tool_delta(self, call: Mapping[str, Any], position: int, out: list[bytes]) -> None:
        """A tool call's fragment (name and/or argument text) for call `index`."""
        raise NotImplementedError

    def _finish_choice(self, choice: Mapping[str, Any], out: list[bytes]) -> None:
        """Choice 0 carried a finish reason: close what is open."""
        raise NotImplementedError

    # --- shared internals ----------------------------------------------------------------------------

    def _choice(self, choice: Mapping[str, Any], out: list[bytes]) -> None:
        """Route choice 0's delta: reasoning, then text, then tool-call fragments; then its finish."""
        delta = choice.get("delta") or {}
        if isinstance(delta, Mapping):
            reasoning = reasoning_of(delta)
            if reasoning:
                self._text_delta(self.REASONING, reasoning, out)
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text_delta(self.TEXT, content, out)
            for position, call in enumerate(delta.get("tool_calls") or []):
                if isinstance(call, Mapping):
                    self._tool_delta(call, position, out)
        if choice.get("finish_reason") is not None:
            self._finish_choice(choice, out)

    def _hold_tool(self, index: int, call: Mapping[str, Any], fragment: str, out: list[bytes]) -> None:
        """A tool call's id and name may arrive over several chunks: hold its fragments until it has a
        name, then let the subclass start it (`_start_tool`), which writes what was held."""
        function = call.get("function") or {}
        pending = self._pending_tools.setdefault(index, {"id": None, "name": "", "arguments": ""})
        if call.get("id"):
            pending["id"] = call["id"]
        if isinstance(function, Mapping) and function.get("name"):
            pending["name"] += function["name"]
        pending["arguments"] += fragment
        if pending["name"]:
            self._start_tool(index, out)

    def _start_tool(self, index: int, out: list[bytes]) -> None:
        """Open the tool call held under `index` (its fragments are in `_pending_tools[index]`)."""
        raise NotImplementedError

    def _feed_items(self, items: list[dict[str, Any] | str]) -> bytes:
        out = b""
        for item in items:
            out += self.finish() if item == DONE else self.feed(item)  # type: ignore[arg-type]
        return out

    def _anomaly(self, what: str) -> None:
        if what not in self.anomalies:
            self.anomalies.append(what)
