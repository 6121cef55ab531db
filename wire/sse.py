"""Incremental server-sent-events parsing into JSON payloads: one parser for the stream translators
(per relayed chunk) and for assembling recorded streams (when records roll).

Event names are not kept: every payload the proxy reads (Chat chunks, Anthropic and Responses events)
names its own kind in its data.
"""

from __future__ import annotations

import json
from typing import Any, Final

DONE: Final = "[DONE]"


class SSEDecoder:
    """Feed raw upstream bytes in whatever pieces the network gives; get back each event's payload:
    a dict for a JSON object, or `DONE` for `data: [DONE]`. Comments and malformed payloads are skipped
    (counted in `malformed`)."""

    __slots__ = ("_buf", "_data", "malformed")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self.malformed = 0

    def feed(self, raw: bytes) -> list[dict[str, Any] | str]:
        self._buf += raw
        out: list[dict[str, Any] | str] = []
        while True:
            cut = self._buf.find(b"\n")
            if cut < 0:
                return out
            line = self._buf[:cut].rstrip(b"\r")
            self._buf = self._buf[cut + 1 :]
            self._line(line, out)

    def flush(self) -> list[dict[str, Any] | str]:
        """End of stream: whatever was pending is dispatched."""
        out: list[dict[str, Any] | str] = []
        if self._buf:
            self._line(self._buf.rstrip(b"\r"), out)
            self._buf = b""
        self._dispatch(out)
        return out

    def _line(self, line: bytes, out: list[dict[str, Any] | str]) -> None:
        if not line:
            self._dispatch(out)
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)

    def _dispatch(self, out: list[dict[str, Any] | str]) -> None:
        if not self._data:
            return
        payload = b"\n".join(self._data)
        self._data = []
        if payload.strip() == b"[DONE]":
            out.append(DONE)
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.malformed += 1
            return
        if isinstance(obj, dict):
            out.append(obj)
        else:
            self.malformed += 1


def json_events(raw: bytes) -> list[dict[str, Any]]:
    """Every JSON-object payload of a whole recorded stream (`[DONE]` and malformed ones skipped)."""
    decoder = SSEDecoder()
    items = decoder.feed(raw) + decoder.flush()
    return [item for item in items if isinstance(item, dict)]
