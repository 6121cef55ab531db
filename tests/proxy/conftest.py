"""Fixtures: the proxy app in-process with an httpx.MockTransport upstream (no sockets, no disk)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.config import ProxySettings
from proxy.sink import MemorySink

Handler = Callable[[httpx.Request], Any]


@contextlib.asynccontextmanager
async def proxied(handler: Handler, **settings: Any) -> AsyncIterator[tuple[httpx.AsyncClient, MemorySink]]:
    """A client talking to the proxy app, whose upstream is `handler` (an httpx.MockTransport)."""
    sink = MemorySink()
    cfg = ProxySettings(upstream="http://upstream.test", **settings)
    app = create_app(cfg, sink=sink, transport=httpx.MockTransport(handler))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
            yield client, sink


@pytest.fixture
def seen() -> list[httpx.Request]:
    return []


def sse(*events: tuple[str | None, str]) -> bytes:
    out = b""
    for name, data in events:
        if name:
            out += f"event: {name}\n".encode()
        out += f"data: {data}\n\n".encode()
    return out


class Chunks(httpx.AsyncByteStream):
    """A body the transport hands out chunk by chunk, as a real socket would (not pre-read)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for c in self.chunks:
            yield c


def reply(
    status: int, body: bytes | dict[str, Any], content_type: str = "application/json", **headers: str
) -> httpx.Response:
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    hdrs = {"content-type": content_type, **{k.replace("_", "-"): v for k, v in headers.items()}}
    return httpx.Response(status, stream=Chunks(raw), headers=hdrs)
