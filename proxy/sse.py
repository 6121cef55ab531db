"""Server-sent events parsing (off the hot path: used when rolling records, never per relayed chunk)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class Event:
    event: str | None
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


def parse(raw: bytes) -> Iterator[Event]:
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    for block in text.split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        if data:
            yield Event(name, "\n".join(data))


def json_events(raw: bytes) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """Events whose data is a JSON object; `[DONE]` and malformed payloads are skipped."""
    for ev in parse(raw):
        if ev.data == "[DONE]":
            continue
        try:
            obj = ev.json()
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield ev.event, obj
