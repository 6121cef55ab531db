"""Fixtures: the proxy app in-process with an httpx.MockTransport upstream (no sockets, no disk)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
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
    settings.setdefault("discover_context", False)  # the handler sees only the calls a test makes
    cfg = ProxySettings(upstream="http://upstream.test", **settings)
    app = create_app(cfg, sink=sink, transport=httpx.MockTransport(handler))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
            yield client, sink


@contextlib.asynccontextmanager
async def proxied_app(
    handler: Handler | httpx.AsyncBaseTransport, sink: Any = None, **settings: Any
) -> AsyncIterator[Any]:
    """The proxy app itself (lifespan running), for tests that speak ASGI to it (tests/proxy/asgi_client.py)."""
    settings.setdefault("discover_context", False)
    cfg = ProxySettings(upstream="http://upstream.test", **settings)
    transport = handler if isinstance(handler, httpx.AsyncBaseTransport) else httpx.MockTransport(handler)
    app = create_app(cfg, sink=sink if sink is not None else MemorySink(), transport=transport)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
def seen() -> list[httpx.Request]:
    return []


def anthropic_message(text: str, input_tokens: int) -> dict[str, Any]:
    """A whole Anthropic Messages reply of `text` (one output token), as an upstream sends it."""
    return {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }


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


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs, mounted for the test and unmounted after it (the full-disk cases). Skipped, saying
    why, only where this process may not mount (not root, no CAP_SYS_ADMIN)."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 3 MiB tmpfs for the full-disk case: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory, leave: int = 0) -> None:
    """Fill the file system of `directory` to the brim (or up to `leave` bytes free)."""
    fd = os.open(f"{directory}/filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        block = b"\0" * (1 << 16)
        while True:
            st = os.statvfs(directory)
            free = st.f_bavail * st.f_frsize - leave
            if leave and free <= 0:
                break
            os.write(fd, block[: max(1, min(len(block), free))] if leave else block)
    except OSError:
        pass
    finally:
        os.close(fd)
