"""Errors in each API's own shape, as whole bodies and as stream events (those are `wire.errors`', chosen by
the API's shape)."""

from __future__ import annotations

import json

from wire import shape_of
from wire.errors import chat_stream_error

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    415: "invalid_request_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    408: "timeout",
    413: "invalid_request_error",
    415: "invalid_request_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout",
}


class ProxyError(Exception):
    """Base of the errors `proxy` raises on purpose (beside the builtin type callers already catch)."""


class BadReply(ProxyError):
    """The upstream answered 2xx with something that is not a reply of the kind asked for."""


def error_body(family: str, status: int, message: str) -> bytes:
    if family == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    kind = _OPENAI_TYPES.get(status, "api_error")
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()


def stream_error_event(api: str, message: str) -> bytes:
    """The event a client of `api` understands as 'the stream failed', ending the stream (its shape's)."""
    shape = shape_of(api)
    return (shape.stream_error if shape else chat_stream_error)(message)
