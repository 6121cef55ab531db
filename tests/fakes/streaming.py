"""A raw ASGI response for the scripted upstream: one write per chunk, optional compression, faults.

Starlette's StreamingResponse cannot end a response early on purpose; this one can: with ``drop_after``
it sends that many chunks and returns without finishing, and uvicorn then closes the connection mid-body
(the client sees an incomplete chunked or content-length body), which is what a crashing upstream does.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from typing import Any, Protocol

import brotli
import zstandard
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from tests.fakes.scripted_policy import Behaviour


class _Compressor(Protocol):
    def chunk(self, data: bytes) -> bytes: ...

    def finish(self) -> bytes: ...


class _Gzip:
    def __init__(self) -> None:
        self._z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)

    def chunk(self, data: bytes) -> bytes:
        return self._z.compress(data) + self._z.flush(zlib.Z_SYNC_FLUSH)

    def finish(self) -> bytes:
        return self._z.flush()


class _Brotli:
    def __init__(self) -> None:
        self._b = brotli.Compressor()

    def chunk(self, data: bytes) -> bytes:
        return bytes(self._b.process(data)) + bytes(self._b.flush())

    def finish(self) -> bytes:
        return bytes(self._b.finish())


class _Zstd:
    def __init__(self) -> None:
        self._z = zstandard.ZstdCompressor().compressobj()

    def chunk(self, data: bytes) -> bytes:
        return self._z.compress(data) + self._z.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)

    def finish(self) -> bytes:
        return self._z.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)


COMPRESSORS = {"gzip": _Gzip, "br": _Brotli, "zstd": _Zstd}


class ChunkedResponse(Response):
    """Sends each chunk as its own body message; honours ``drop_after`` and ``compress``."""

    def __init__(
        self,
        chunks: Iterator[bytes],
        how: Behaviour,
        media_type: str,
        headers: dict[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        self.chunks = chunks
        self.how = how
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        extra = dict(headers or {})
        if how.compress:
            extra["content-encoding"] = how.compress
            length = None  # the compressed length is not known up front
        self.init_headers(extra)
        if length is not None:
            self.raw_headers.append((b"content-length", str(length).encode()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # uvicorn ignores writes after a client disconnect; watch for it so a long stream stops early.
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            await self._send_all(send, gone)
        finally:
            watcher.cancel()

    async def _send_all(self, send: Send, gone: asyncio.Event) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        compressor: Any = COMPRESSORS[self.how.compress]() if self.how.compress else None
        limit = self.how.drop_after
        for sent, chunk in enumerate(self.chunks):
            if gone.is_set() or (limit is not None and sent >= limit):
                return  # client gone, or drop: leave the body unfinished; the server closes the connection
            if limit is not None and self.media_type == "application/json" and compressor is None:
                # a non-streamed body is one chunk: cut it in half
                await send(
                    {"type": "http.response.body", "body": chunk[: len(chunk) // 2], "more_body": True}
                )
                return
            data = compressor.chunk(chunk) if compressor else chunk
            await send({"type": "http.response.body", "body": data, "more_body": True})
            if sent % 16 == 15:
                await asyncio.sleep(0)  # let other streams and the disconnect watcher run
        tail = compressor.finish() if compressor else b""
        await send({"type": "http.response.body", "body": tail, "more_body": False})
