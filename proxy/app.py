"""The proxy's ASGI app: routes, lifespan (upstream clients, sink, the uploader to a store), health and metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from proxy.asgi import Receive, Send
from proxy.chatmode import exchange_factory
from proxy.config import ProxySettings
from proxy.exchange import ExchangeFactory
from proxy.metrics import ProxyMetrics
from proxy.relay import Relay
from proxy.roller import Prepare
from proxy.sink import CallSink, SpoolSink
from proxy.tokenize import TokenizeFiller
from proxy.uploader import proxy_uploader
from proxy.upstream import UpstreamClients

log = logging.getLogger(__name__)


def spool_sink(settings: ProxySettings, on_rolled: Callable[[], None] | None = None) -> SpoolSink:
    return SpoolSink(
        settings.spool_dir,
        settings.calls_dir,
        settings.proxy_id,
        max_records=settings.segment_max_records,
        max_bytes=settings.segment_max_bytes,
        max_age_s=settings.segment_max_age_s,
        min_free_bytes=settings.min_free_bytes,
        retry_max_s=settings.roll_retry_max_s,
        prepare=_tokenize_filler(settings) if settings.tokenize_native else None,
        on_rolled=on_rolled,
    )


def _tokenize_filler(settings: ProxySettings) -> Prepare:
    key = settings.upstream_key.get_secret_value() if settings.upstream_key else None
    return TokenizeFiller(settings.upstream, key)


class _RelayEndpoint:
    """The catch-all route: a plain ASGI endpoint, so the relay reads and writes the raw messages."""

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        await scope["app"].state.relay(scope, receive, send)


def create_app(
    settings: ProxySettings,
    *,
    sink: CallSink | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    exchange: ExchangeFactory | None = None,
) -> Starlette:
    """Build the app. `sink` and `transport` are seams for tests (MemorySink, httpx.MockTransport)."""
    uploader = proxy_uploader(settings)
    the_sink: CallSink = (
        sink if sink is not None else spool_sink(settings, uploader.notify if uploader else None)
    )
    metrics = ProxyMetrics(the_sink, uploader)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if isinstance(the_sink, SpoolSink):
            the_sink.start()  # rolls what an earlier process left: the uploader's first sweep takes it
        if uploader is not None:
            uploader.start()
            uploader.notify()
        try:
            async with UpstreamClients(settings, transport) as client:
                if settings.served_context is None and settings.discover_context:
                    settings.served_context = await served_context(client.pick(), settings)
                app.state.relay = Relay(
                    settings, client, the_sink, metrics, exchange or _default_exchange(settings)
                )
                yield
        finally:
            the_sink.close()  # the last segment is rolled first, so the final drain uploads it too
            if uploader is not None:
                await asyncio.to_thread(uploader.close, settings.upload_drain_s)

    async def healthz(request: Request) -> Response:
        health = the_sink.health
        body = {
            "status": "ok" if health.ok else "unavailable",
            "proxy_id": settings.proxy_id,
            "upstream": settings.upstream,
            "recording": {"ok": health.ok, "reason": health.reason, "free_bytes": health.free_bytes},
            "spool_depth": the_sink.depth,
        }
        if uploader is not None:  # a store that is away is not a health problem: the spool holds the calls
            st = uploader.stats
            body["upload"] = {
                "store": settings.store_url,
                "uploaded": st.uploaded,
                "pending": len(uploader.pending()),
                "failures": st.failures,
                "last_error": st.last_error,
            }
        return JSONResponse(body, status_code=200 if health.ok else 503)

    async def prom(request: Request) -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", prom, methods=["GET"]),
        # Everything else goes to the relay, which knows the exact route table and 404s the rest.
        Route("/{path:path}", _RelayEndpoint()),
    ]
    app = Starlette(lifespan=lifespan, routes=routes)
    app.state.metrics = metrics
    app.state.sink = the_sink
    app.state.uploader = uploader
    app.state.settings = settings
    return app


async def served_context(client: httpx.AsyncClient, settings: ProxySettings) -> int | None:
    """The upstream's max_model_len from /v1/models (vLLM and the stand-in list it), or None: then only
    `--max-tokens-cap` lowers completion limits (proxy/limits.py)."""
    headers = (
        {"authorization": f"Bearer {settings.upstream_key.get_secret_value()}"}
        if settings.upstream_key
        else {}
    )
    try:
        reply = await client.get(f"{settings.upstream}/v1/models", headers=headers, timeout=10)
        limit = reply.raise_for_status().json()["data"][0].get("max_model_len")
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        log.warning("served context unknown (%s: %s): completion limits pass as sent", type(e).__name__, e)
        return None
    log.info("upstream serves %s tokens of context", limit)
    return int(limit) if isinstance(limit, int) and limit > 0 else None


def _default_exchange(settings: ProxySettings) -> ExchangeFactory:
    return exchange_factory(settings)
