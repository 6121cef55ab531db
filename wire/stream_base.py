"""What the two stream translators share: reading upstream Chat Completions chunks, collecting token ids
and usage, and handing choice 0 of each chunk to the subclass, which writes its own API's events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wire.common import JSON
from wire.sse import DONE, SSEDecoder
from wire.token_ids import TokenIdCollector


class ChatStreamTranslator:
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

    def _choice(self, choice: Mapping[str, Any], out: list[bytes]) -> None:
        raise NotImplementedError

    # --- shared internals ----------------------------------------------------------------------------

    def _feed_items(self, items: list[dict[str, Any] | str]) -> bytes:
        out = b""
        for item in items:
            out += self.finish() if item == DONE else self.feed(item)  # type: ignore[arg-type]
        return out

    def _anomaly(self, what: str) -> None:
        if what not in self.anomalies:
            self.anomalies.append(what)
