"""The wire formats' errors: ``WireError``, the base of what `wire` raises on purpose (a ``ValueError``, which
callers of a parser already catch); and the event each API's client reads as 'the stream failed', ending
the stream (the proxy sends it when the upstream or the proxy itself cuts a stream short)."""

from __future__ import annotations

import json


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
