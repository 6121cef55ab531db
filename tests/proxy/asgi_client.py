"""Driving the proxy app at the ASGI level: what httpx's ASGITransport cannot do (hang up mid-upload or
mid-stream, read a response without keeping it), for the disconnect and memory tests."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Exchange:
    status: int | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    keep_body: bool = True
    received: int = 0
    ended: bool = False

    def json(self) -> Any:
        return json.loads(bytes(self.body))


async def asgi_request(
    app: Any,
    method: str,
    path: str,
    body: list[bytes] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    hang_up_after: float | None = None,
    hang_up_after_bytes: int | None = None,
    keep_body: bool = True,
    incomplete_upload: bool = False,
) -> Exchange:
    """One request. `body` chunks are sent in turn (`incomplete_upload`: the last is not the end); with
    `hang_up_after` (seconds) or `hang_up_after_bytes` (of the response) the client disconnects."""
    out = Exchange(keep_body=keep_body)
    chunks = list(body or [])
    gone = asyncio.Event()
    started = time.monotonic()

    async def receive() -> dict[str, Any]:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks) or incomplete_upload}
        if hang_up_after is not None:
            await asyncio.sleep(max(0.0, hang_up_after - (time.monotonic() - started)))
            gone.set()
            return {"type": "http.disconnect"}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if gone.is_set():
            return  # what uvicorn does after a disconnect: nothing reaches the client
        if message["type"] == "http.response.start":
            out.status, out.headers = message["status"], list(message.get("headers", []))
            return
        data = message.get("body", b"")
        out.received += len(data)
        if out.keep_body:
            out.body += data
        if not message.get("more_body", False):
            out.ended = True
            gone.set()
        if hang_up_after_bytes is not None and out.received >= hang_up_after_bytes:
            gone.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path.partition("?")[0],
        "raw_path": path.partition("?")[0].encode(),
        "query_string": path.partition("?")[2].encode(),
        "root_path": "",
        "headers": [(b"host", b"proxy.test"), *(headers or [])],
        "client": ("127.0.0.1", 1234),
        "server": ("proxy.test", 80),
        "state": {},
    }
    await app(scope, receive, send)
    return out


class Endless(httpx.AsyncByteStream):
    """An upstream stream that never ends on its own; `closed` is set when the relay lets it go."""

    def __init__(self, chunk: bytes, every_s: float = 0.005, limit: int | None = None) -> None:
        self.chunk, self.every_s, self.limit = chunk, every_s, limit
        self.sent = 0
        self.closed_at: float | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while self.limit is None or self.sent < self.limit:
                await asyncio.sleep(self.every_s)
                self.sent += 1
                yield self.chunk
        finally:
            self.closed_at = time.monotonic()

    async def aclose(self) -> None:
        if self.closed_at is None:
            self.closed_at = time.monotonic()


def gzip_bomb(decoded_gib: int = 1) -> bytes:
    """A ~2 KB body that is 1 GiB of zeros under `Content-Encoding: gzip, gzip`: the inner layer is 1024
    gzip members of 1 MiB each (a valid multi-member gzip stream), built in milliseconds."""
    member = gzip.compress(bytes(1 << 20), 9)
    return gzip.compress(member * (1024 * decoded_gib), 9)
