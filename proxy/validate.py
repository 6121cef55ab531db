"""Checking a request body before anything is forwarded: decode, parse, and the fields the proxy relies on.

`parse_json_body` is plain blocking code (decompression, JSON parsing); the relay runs large bodies in a
worker thread. Every way a client's bytes can be wrong ends in `Rejected` with a 4xx and a reason.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.codec import TooLarge, Unsupported, decode_iter, layers
from proxy.errors import ProxyError
from proxy.routes import Route


class Rejected(ProxyError):
    def __init__(self, status: int, reason: str, body: bytes = b"") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.body = body  # what was read of the request, for the record


_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "messages": (list,),
    "max_tokens": (int,),
    "prompt": (str, list),
    "input": (str, list),
    "stream": (bool,),
    "tools": (list,),
}


def decode(raw: bytes, encoding: str | None, cap: int) -> bytes:
    """The body as the client meant it: every Content-Encoding layer undone, at most `cap` bytes."""
    try:
        if not layers(encoding):
            return raw
        return b"".join(decode_iter([raw], encoding, cap))
    except Unsupported as exc:
        raise Rejected(415, str(exc), raw) from None
    except TooLarge as exc:
        raise Rejected(413, str(exc), raw) from None
    except Exception as exc:  # zlib, brotli and zstd each raise their own kind
        raise Rejected(400, f"cannot decode content-encoding {encoding!r}: {exc}", raw) from None


def parse_json_body(raw: bytes, encoding: str | None, route: Route, cap: int) -> tuple[dict[str, Any], bytes]:
    """Decode and check a body; returns the object and the decoded bytes (what the client sent)."""
    data = decode(raw, encoding, cap)
    try:
        body = json.loads(data)
    except RecursionError:
        raise Rejected(400, "request body is nested too deeply", data) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise Rejected(400, f"request body is not valid JSON: {exc}", data) from None
    if not isinstance(body, dict):
        raise Rejected(400, f"request body must be a JSON object, got {type(body).__name__}", data)
    for name in route.required:
        if name not in body:
            raise Rejected(400, f"missing required field '{name}'", data)
    for name, types in _TYPES.items():
        if name not in body:
            continue
        value = body[name]
        if value is None and name not in route.required:
            continue  # an explicit null means "not set" in these APIs
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise Rejected(400, f"field '{name}' must be {' or '.join(t.__name__ for t in types)}", data)
    for name in route.shape.at_least_one:
        if body[name] < 1:
            raise Rejected(400, f"field '{name}' must be at least 1", data)
    return body, data
