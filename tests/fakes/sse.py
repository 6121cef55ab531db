"""Parse Server-Sent Events text into (event, data) pairs, for tests of streamed responses."""

from __future__ import annotations

import json
from typing import Any


def parse_sse(text: str) -> list[tuple[str | None, Any]]:
    """Each event as (event name or None, parsed JSON data, or the raw string such as "[DONE]")."""
    events: list[tuple[str | None, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data_lines = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data_lines.append(line[5:].lstrip())
        if not data_lines:
            continue
        raw = "\n".join(data_lines)
        try:
            events.append((name, json.loads(raw)))
        except ValueError:
            events.append((name, raw))
    return events
