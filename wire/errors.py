"""The wire formats' errors: ``WireError``, the base of what `wire` raises on purpose (a ``ValueError``, which
callers of a parser already catch); and the event each API's client reads as 'the stream failed', ending
the stream (the proxy sends it when the upstream or the proxy itself cuts a stream short)."""

from __future__ import annotations

import json
from typing import Any


class WireError(ValueError):
    """A body, stream or API the translations cannot take."""


def anthropic_stream_error(message: str) -> bytes:
    payload = {"type": "error", "error": {"type": "api_error", "message": message}}
    return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"


def responses_stream_error(message: str) -> bytes:
    payload = {"type": "error", "code": "upstream_error", "message": message, "param": None}
    return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"


def chat_stream_error(message: str) -> bytes:
    """Chat and legacy Completions streams (and any other): an `error` object in a data-only event."""
    payload = {"error": {"message": message, "type": "upstream_error", "code": 502}}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def stream_error_message(event: dict[str, Any]) -> str | None:
    """The message of a stream event that says the stream failed, in any API's shape (the ones above, and
    Responses' `response.failed`); None for every other event. A client's SDK raises on such an event,
    whatever came before it."""
    kind = event.get("type")
    if kind == "response.failed":
        err = (event.get("response") or {}).get("error") or {}
    elif kind == "error":
        err = event.get("error") if isinstance(event.get("error"), dict) else event
    elif kind is None and "error" in event and "choices" not in event:
        err = event["error"] if isinstance(event["error"], dict) else {"message": event["error"]}
    else:
        return None
    return str(err.get("message") or "the stream failed")
