"""A small set of httpx clients to the upstream.

httpcore's connection pool scans all of its connections for every request, which costs more than
relaying the stream itself once hundreds of streams are open; several small pools keep each scan short.
"""

from __future__ import annotations

import itertools
from contextlib import AsyncExitStack

import httpx

from proxy.config import ProxySettings


class UpstreamClients:
    def __init__(
        self, settings: ProxySettings, transport: httpx.AsyncBaseTransport | None = None, shards: int = 8
    ) -> None:
        timeout = httpx.Timeout(settings.read_timeout_s, connect=settings.connect_timeout_s)
        # A given transport is shared: one MockTransport stands for one upstream.
        if transport is None and settings.upstream_transport == "aiohttp":
            from proxy.aiotransport import AiohttpTransport

            transport = AiohttpTransport(settings.connect_timeout_s, settings.read_timeout_s)
            shards = 1  # aiohttp's pool has no per-request scan
        n = 1 if transport is not None else shards
        self._clients = [
            httpx.AsyncClient(
                transport=transport,
                timeout=timeout,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            )
            for _ in range(n)
        ]
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
