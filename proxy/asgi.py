"""The relay's side of ASGI: reading a request body under limits, answering, and noticing a client leave.

Headers stay the bytes they were on the wire (a non-ASCII `User-Agent` or `X-Note: café` is relayed as it
came, never re-encoded). `Flight` is one relayed call's cancellation: the client going away or the shutdown
deadline cuts it, and the relay then finishes the call's record knowing which of the two it was.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import anyio

from proxy import errors
from proxy.errors import ProxyError
from proxy.validate import Rejected

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]


class ClientGone(ProxyError):
    """The client hung up while sending its request; `body` is what had arrived."""

    def __init__(self, body: bytes) -> None:
        super().__init__("client disconnected while sending the request body")
        self.body = body


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def text(value: bytes | None, limit: int = 1024) -> str | None:
    """A header value as text for a record: UTF-8 where it is, never an exception."""
    return value[:limit].decode("utf-8", errors="replace") if value is not None else None


async def read_body(receive: Receive, cap: int, timeout_s: float, declared: bytes | None, keep: int) -> bytes:
    """The whole request body, or Rejected (400/408/413) or ClientGone, each with what arrived (`keep` bytes)."""
    expected = None
    if declared is not None:
        if not declared.strip().isdigit():
            raise Rejected(400, "Content-Length is not a number")
        expected = int(declared)
        if expected > cap:
            raise Rejected(413, f"request body of {expected} bytes exceeds the {cap}-byte limit")
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone(b"".join(chunks)[:keep])
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > cap:
                    raise Rejected(413, f"request body exceeds the {cap}-byte limit", b"".join(chunks)[:keep])
                if chunk:
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        of = f" of {expected}" if expected is not None else ""
        reason = f"request body not received within {timeout_s:g} s ({size}{of} bytes arrived)"
        raise Rejected(408, reason, b"".join(chunks)[:keep]) from None


class Responder:
    """Sends one response and counts what was handed to the client."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = self.complete = False
        self.delivered = 0

    async def start(self, status: int, headers: Headers) -> None:
        self.started = True
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})
        self.delivered += len(data)

    async def end(self) -> None:
        self.complete = True
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def whole(self, status: int, headers: Headers, pieces: Iterable[bytes], length: int) -> None:
        await self.start(status, [*headers, (b"content-length", str(length).encode())])
        for piece in pieces:
            if piece:
                await self.body(piece)
        await self.end()

    async def error(self, family: str, status: int, reason: str, *, close: bool = False) -> None:
        body = errors.error_body(family, status, reason)
        headers = [(b"content-type", b"application/json")]
        if close:  # the request was not read to its end: the connection cannot carry another one
            headers.append((b"connection", b"close"))
        await self.whole(status, headers, [body], len(body))


class Flight:
    """Cancellation of one relayed call. Each phase runs in `scope()`; `cut()` cancels the running phase and
    every later one, and `cut_by` says why ('client' or 'shutdown')."""

    def __init__(self) -> None:
        self.cut_by: str | None = None
        self._scope: anyio.CancelScope | None = None

    def scope(self) -> anyio.CancelScope:
        self._scope = anyio.CancelScope()
        if self.cut_by is not None:
            self._scope.cancel()
        return self._scope

    def cut(self, why: str) -> None:
        if self.cut_by is None:
            self.cut_by = why
        if self._scope is not None:
            self._scope.cancel()


async def watch_disconnect(receive: Receive, flight: Flight, done: Callable[[], bool]) -> None:
    """Cut the flight when the client goes away (`done()`: the response already ended, so it did not)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not done():
                flight.cut("client")
            return
