"""The HTTP server around the app: uvicorn with the proxy's limits, and a shutdown with a deadline.

- Request head: at most `max_header_bytes` (more is a 431 and the connection is closed before the parser
  holds it), and at most `header_timeout_s` to send it, counted from the connection's first byte or the end
  of the previous response, so a client that dribbles a head (slowloris) is cut off (408, closed). Both are
  checked here, in front of uvicorn's httptools parser (which has no head limit of its own): uvicorn's h11
  protocol has a head limit (`h11_max_incomplete_event_size`) but parses and writes every chunk in Python,
  and measured 10-15 % more proxy CPU per streamed call in benchmarks/proxy_overhead.py (BENCHMARKS.md).
- Idle keep-alive connections close after `idle_timeout_s`; at most `max_connections` at once (then 503).
- SIGTERM: listening stops, then in-flight calls have `shutdown_timeout_s` to finish; after that the relay
  cuts them (a stream ends with the API's error event) and records them, and the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server

from proxy.config import ProxySettings

log = logging.getLogger(__name__)
_REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a size limit and a deadline on each request's head."""

    head_timeout_s = 15.0
    max_head_bytes = 64 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._tail = b""  # the last bytes of the head so far: its end may straddle two reads

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:  # receiving a request's head
            if self._head_timer is None:
                self._arm()  # the first byte of a new request on a kept-alive connection
            if self._head_too_large(data):
                self._refuse(_HEAD_TOO_LARGE, "a request head over %d bytes", self.max_head_bytes)
                return
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # the head is complete: the request is the app's now
            self._head_bytes, self._tail = 0, b""

    def _head_too_large(self, data: bytes) -> bool:
        edge = (self._tail + data[:3]).find(b"\r\n\r\n")  # an end that straddles two reads
        end = edge + 4 - len(self._tail) if edge >= 0 else data.find(b"\r\n\r\n")
        if edge < 0 and end >= 0:
            end += 4
        self._head_bytes += end if end >= 0 else len(data)
        self._tail = data[-3:] if len(data) >= 3 else (self._tail + data)[-3:]
        return self._head_bytes > self.max_head_bytes

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.cycle is None or self.cycle.response_complete:
            self._refuse(_REQUEST_TIMEOUT, "no complete request head in %.0f s", self.head_timeout_s)

    def _refuse(self, reply: bytes, why: str, arg: float) -> None:
        if not self.transport.is_closing():
            log.info("closing a connection: " + why, arg)
            self.transport.write(reply)
            self.transport.close()


class ProxyServer(Server):
    """uvicorn's server, telling the app when shutdown begins so it can enforce its own deadline."""

    def __init__(self, config: uvicorn.Config, app: Any, deadline_s: float) -> None:
        super().__init__(config)
        self._app, self._deadline_s = app, deadline_s

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        relay = getattr(self._app.state, "relay", None)
        if relay is not None:
            relay.begin_shutdown(self._deadline_s)
        await super().shutdown(sockets)


def build_server(app: Any, settings: ProxySettings) -> ProxyServer:
    limits = {"head_timeout_s": settings.header_timeout_s, "max_head_bytes": settings.max_header_bytes}
    protocol = type("ProxyHttpProtocol", (GuardedProtocol,), limits)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        # The upstream's own Date/Server headers are relayed; uvicorn must not add a second pair.
        server_header=False,
        date_header=False,
        http=protocol,
        timeout_keep_alive=int(max(1, settings.idle_timeout_s)),
        limit_concurrency=settings.max_connections,
        # A backstop only: the relay cuts and records its calls at shutdown_timeout_s.
        timeout_graceful_shutdown=int(settings.shutdown_timeout_s + 10),
        lifespan="on",
    )
    return ProxyServer(config, app, settings.shutdown_timeout_s)
