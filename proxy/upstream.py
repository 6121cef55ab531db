"""The httpx clients to the upstream, over aiohttp (the default) or httpx's own transport.

aiohttp parses upstream streams in C and hands over whatever has arrived, so a burst of SSE events is relayed
with one write; httpcore parses every chunk in pure Python (h11). The aiohttp transport is the kept library
`httpx-aiohttp`, which replaced a hand-written one (proxy/aiotransport.py) after measuring both with
benchmarks/proxy_overhead.py on this project's 2-core machine (load ≈ 14 from other work, 3 interleaved runs
of 1,024 streamed 50-event calls per level): proxy CPU per call 1.72 / 1.67 ms at 64 / 256 streams with the
hand-written transport, 1.78 / 1.70 ms with httpx-aiohttp — equal within the runs' ±15 % spread — and
3.4 / 3.6 ms with httpcore. docs/BENCHMARKS.md has the runs. Three things the library does not do are set
here: a session that adds no header the client did not send and decodes nothing, a pool without a
connection cap (its default session allows 100), and a refused connection reported as a connection error
rather than a timeout (it maps every aiohttp connection error to `ConnectTimeout`).

httpcore's connection pool scans all of its connections for every request, which costs more than relaying
the stream itself once hundreds of streams are open; with it, several small pools keep each scan short.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import aiohttp
import httpx
import httpx_aiohttp

from proxy.config import ProxySettings


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30, ttl_dns_cache=60),
        auto_decompress=False,  # bodies are relayed as they came and recorded decoded later
        skip_auto_headers=("User-Agent", "Accept"),
    )


def _is_timeout(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, TimeoutError | aiohttp.ServerTimeoutError)


class _Body(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx.ConnectTimeout as exc:  # the library's name for "the connection broke" mid-body
            if _is_timeout(exc):
                raise httpx.ReadTimeout(str(exc)) from exc.__cause__
            raise httpx.RemoteProtocolError(f"upstream broke the body: {exc}") from exc.__cause__

    async def aclose(self) -> None:
        await self._inner.aclose()


class AiohttpTransport(httpx_aiohttp.AiohttpTransport):
    def __init__(self) -> None:
        super().__init__(client=_session)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except httpx.ConnectTimeout as exc:
            if _is_timeout(exc):
                raise
            raise httpx.ConnectError(str(exc), request=request) from exc.__cause__
        response.stream = _Body(response.stream)  # type: ignore[arg-type]
        return response


class UpstreamClients:
    def __init__(
        self, settings: ProxySettings, transport: httpx.AsyncBaseTransport | None = None, shards: int = 8
    ) -> None:
        timeout = httpx.Timeout(settings.read_timeout_s, connect=settings.connect_timeout_s)
        # A given transport is shared: one MockTransport stands for one upstream.
        if transport is None and settings.upstream_transport == "aiohttp":
            transport = AiohttpTransport()
        n = 1 if transport is not None else shards  # aiohttp's pool has no per-request scan
        self._clients = [
            httpx.AsyncClient(
                transport=transport,
                timeout=timeout,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            )
            for _ in range(n)
        ]
        for c in self._clients:
            # Only the client's own headers go upstream: no `User-Agent: python-httpx`, no default Accept.
            for name in list(c.headers):
                del c.headers[name]
        self._next = itertools.cycle(self._clients)
        self._stack = AsyncExitStack()

    def pick(self) -> httpx.AsyncClient:
        return next(self._next)

    async def __aenter__(self) -> UpstreamClients:
        for c in self._clients:
            await self._stack.enter_async_context(c)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()
