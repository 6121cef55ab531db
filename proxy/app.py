"""The proxy's ASGI app: routes, lifespan (upstream client, sink), health and metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from proxy.config import ProxySettings
from proxy.exchange import ExchangeFactory
from proxy.metrics import ProxyMetrics
from proxy.relay import Relay
from proxy.roller import Prepare
from proxy.sink import CallSink, SpoolSink
from proxy.upstream import UpstreamClients


def spool_sink(settings: ProxySettings) -> SpoolSink:
    return SpoolSink(
        settings.spool_dir,
        settings.calls_dir,
        settings.proxy_id,
        max_records=settings.segment_max_records,
        max_bytes=settings.segment_max_bytes,
        max_age_s=settings.segment_max_age_s,
        prepare=_tokenize_filler(settings) if settings.tokenize_native else None,
    )


def _tokenize_filler(settings: ProxySettings) -> Prepare:
    from proxy.tokenize import TokenizeFiller

    key = settings.upstream_key.get_secret_value() if settings.upstream_key else None
    return TokenizeFiller(settings.upstream, key)


def create_app(
    settings: ProxySettings,
    *,
    sink: CallSink | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    exchange: ExchangeFactory | None = None,
) -> FastAPI:
    """Build the app. `sink` and `transport` are seams for tests (MemorySink, httpx.MockTransport)."""
    the_sink: CallSink = sink if sink is not None else spool_sink(settings)
    metrics = ProxyMetrics(the_sink)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if isinstance(the_sink, SpoolSink):
            the_sink.start()
        async with UpstreamClients(settings, transport) as client:
            app.state.relay = Relay(
                settings, client, the_sink, metrics, exchange or _default_exchange(settings)
            )
            yield
        the_sink.close()

    async def relay(request: Request) -> Response:
        return await request.app.state.relay.handle(request)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "proxy_id": settings.proxy_id, "upstream": settings.upstream})

    async def prom(request: Request) -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", prom, methods=["GET"]),
        # Everything else goes to the relay, which knows the exact route table and 404s the rest.
        Route("/{path:path}", relay, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]),
    ]
    app = FastAPI(lifespan=lifespan, routes=routes, openapi_url=None, docs_url=None, redoc_url=None)
    app.state.metrics = metrics
    app.state.sink = the_sink
    return app


def _default_exchange(settings: ProxySettings) -> ExchangeFactory:
    from proxy.chatmode import exchange_factory

    return exchange_factory(settings)
