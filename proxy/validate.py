"""Reading and checking a request body before anything is forwarded."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from proxy.codec import decode_body
from proxy.routes import Api, Route


class Rejected(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


async def read_body(request: Request, cap: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise Rejected(400, "Content-Length is not a number")
        if int(declared) > cap:
            raise Rejected(413, f"request body of {declared} bytes exceeds the {cap}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise Rejected(413, f"request body exceeds the {cap}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "messages": (list,),
    "max_tokens": (int,),
    "prompt": (str, list),
    "input": (str, list),
    "stream": (bool,),
    "tools": (list,),
}


def parse_json_body(raw: bytes, encoding: str | None, route: Route, cap: int) -> tuple[dict[str, Any], bytes]:
    """Decode and check a body; returns the object and the decoded bytes (what the client sent)."""
    data, err = decode_body(raw, encoding)
    if err:
        raise Rejected(400, err)
    if len(data) > cap:
        raise Rejected(413, f"decoded request body exceeds the {cap}-byte limit")
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Rejected(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Rejected(400, f"request body must be a JSON object, got {type(body).__name__}")
    for name in route.required:
        if name not in body:
            raise Rejected(400, f"missing required field '{name}'")
    for name, types in _TYPES.items():
        value = body.get(name)
        if value is not None and (
            not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
        ):
            raise Rejected(400, f"field '{name}' must be {' or '.join(t.__name__ for t in types)}")
    if route.api == Api.MESSAGES and body["max_tokens"] < 1:
        raise Rejected(400, "field 'max_tokens' must be at least 1")
    return body, data
