"""Incremental server-sent-events parsing into JSON payloads: one parser for the stream translators
(per relayed chunk) and for assembling recorded streams (when records roll).

Event names are not kept: every payload the proxy reads (Chat chunks, Anthropic and Responses events)
names its own kind in its data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Final

DONE: Final = "[DONE]"


class SSEDecoder:
    """Feed raw upstream bytes in whatever pieces the network gives; get back each event's payload:
    a dict for a JSON object, or `DONE` for `data: [DONE]`. Comments and malformed payloads are skipped
    (counted in `malformed`). Linear in the bytes fed, however they are cut: each piece is split once, and
    a line that spans pieces is joined once, when its end arrives."""

    __slots__ = ("_data", "_pending", "malformed")

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # the pieces of a line whose end has not arrived
        self._data: list[bytes] = []
        self.malformed = 0

    def feed(self, raw: bytes) -> list[dict[str, Any] | str]:
        out: list[dict[str, Any] | str] = []
        lines = raw.split(b"\n")
        if len(lines) == 1:
            if raw:
                self._pending.append(raw)
            return out
        if self._pending:
            self._pending.append(lines[0])
            lines[0] = b"".join(self._pending)
            self._pending = []
        tail = lines.pop()
        if tail:
            self._pending.append(tail)
        for line in lines:
            self._line(line.rstrip(b"\r"), out)
        return out

    def flush(self) -> list[dict[str, Any] | str]:
        """End of stream: whatever was pending is dispatched."""
        out: list[dict[str, Any] | str] = []
        if self._pending:
            self._line(b"".join(self._pending).rstrip(b"\r"), out)
            self._pending = []
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
    return list(iter_json_events([raw]))


def iter_json_events(pieces: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """`json_events` over a stream given in pieces (read from disk block by block), never held whole."""
    decoder = SSEDecoder()
    for piece in pieces:
        for item in decoder.feed(piece):
            if isinstance(item, dict):
                yield item
    for item in decoder.flush():
        if isinstance(item, dict):
            yield item
