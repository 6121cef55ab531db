"""Capture what a client sends: an ASGI middleware that records every request (secrets redacted).

Used by the scripted upstream (``--record-dir``) to capture the real agent CLIs' traffic into fixtures,
and kept in memory so tests can ask the upstream what it received (``GET /_scripted/requests``).
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
import time
import zlib
from collections import deque
from pathlib import Path
from typing import Any

import brotli
import zstandard
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization", "openai-api-key"}
REDACTED = "<redacted>"


def decode_body(raw: bytes, content_encoding: str | None) -> bytes:
    """Undo a request's Content-Encoding (gzip, deflate, br, zstd; several may be stacked)."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    try:
        return _undo(raw, codings)
    except (OSError, EOFError, zlib.error, zstandard.ZstdError, brotli.error) as exc:
        raise ValueError(f"body does not decode as {content_encoding}: {exc}") from exc


def _undo(raw: bytes, codings: list[str]) -> bytes:
    for coding in reversed(codings):
        if coding in ("gzip", "x-gzip"):
            raw = gzip.decompress(raw)
        elif coding == "deflate":
            raw = zlib.decompress(raw)
        elif coding == "br":
            raw = brotli.decompress(raw)
        elif coding == "zstd":
            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        elif coding != "identity":
            raise ValueError(f"unsupported Content-Encoding {coding!r}")
    return raw


def redact(headers: list[tuple[str, str]]) -> list[list[str]]:
    """Keep header order and repeats; hide credentials but show their scheme (``Bearer <redacted>``)."""
    out = []
    for name, value in headers:
        if name.lower() in SECRET_HEADERS:
            scheme = value.split(" ", 1)[0] + " " if " " in value else ""
            value = scheme + REDACTED
        out.append([name, value])
    return out


def request_record(scope: Scope, raw: bytes, received_at: float | None = None) -> dict[str, Any]:
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
    encoding = next((v for k, v in headers if k.lower() == "content-encoding"), None)
    record: dict[str, Any] = {
        "method": scope.get("method"),
        "path": scope.get("path"),
        "query": scope.get("query_string", b"").decode("latin-1"),
        "headers": redact(headers),
        "content_encoding": encoding,
        "body_compressed": bool(encoding and encoding.lower() != "identity"),
        "body_bytes_on_wire": len(raw),
        "received_at": received_at if received_at is not None else time.time(),
    }
    try:
        text = decode_body(raw, encoding).decode("utf-8")
        record["body"] = json.loads(text) if text else None
    except ValueError as exc:
        record["body"] = None
        record["body_error"] = str(exc)
    return record


class Recorder:
    """Holds the last ``keep`` requests (raw, parsed lazily) and optionally writes each to a directory."""

    def __init__(self, record_dir: Path | None = None, keep: int = 500) -> None:
        self.record_dir = record_dir
        self._items: deque[tuple[Scope, bytes, float]] = deque(maxlen=keep)
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        if record_dir is not None:
            record_dir.mkdir(parents=True, exist_ok=True)

    def add(self, scope: Scope, raw: bytes) -> None:
        slim = {k: scope.get(k) for k in ("method", "path", "query_string", "headers")}
        now = time.time()
        with self._lock:
            self._items.append((slim, raw, now))
            number = next(self._counter)
        if self.record_dir is not None:
            record = request_record(slim, raw, now)
            name = f"{number:04d}-{record['path'].strip('/').replace('/', '_')}.json"
            (self.record_dir / name).write_text(json.dumps(record, indent=1, ensure_ascii=False))

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            items = list(self._items)
        return [request_record(scope, raw, at) for scope, raw, at in items]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class RecordingMiddleware:
    """Buffers each HTTP request body, records it, then replays it to the wrapped app."""

    def __init__(self, app: ASGIApp, recorder: Recorder, skip_prefix: str = "/_scripted") -> None:
        self.app = app
        self.recorder = recorder
        self.skip_prefix = skip_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"].startswith(self.skip_prefix)
            or scope["path"] == "/health"
        ):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        self.recorder.add(scope, raw)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
