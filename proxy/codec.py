"""Content-Encoding handling: the CLIs advertise gzip, br and zstd; bodies are recorded decoded."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import brotli
import zstandard


def decode_body(data: bytes, encoding: str | None) -> tuple[bytes, str | None]:
    """Decode `data` per its Content-Encoding; on failure return the raw bytes and a reason."""
    if not data or not encoding or encoding.strip().lower() in ("identity", ""):
        return data, None
    try:
        # Encodings apply in order, so undo them in reverse.
        for enc in reversed([e.strip().lower() for e in encoding.split(",")]):
            data = _decode_one(data, enc)
    except Exception as exc:
        return data, f"cannot decode content-encoding {encoding!r}: {exc}"
    return data, None


def _decode_one(data: bytes, enc: str) -> bytes:
    if enc in ("gzip", "x-gzip"):
        return gzip.decompress(data)
    if enc == "deflate":
        try:
            return zlib.decompress(data)
        except zlib.error:
            return zlib.decompress(data, -zlib.MAX_WBITS)
    if enc == "br":
        return bytes(brotli.decompress(data))
    if enc == "zstd":
        # Streamed zstd frames may lack a content size, so use the streaming reader.
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    if enc == "identity":
        return data
    raise ValueError(f"unsupported encoding {enc!r}")


class StreamDecoder:
    """Incremental Content-Encoding decoder, for exchanges that must read a compressed stream."""

    def __init__(self, encoding: str) -> None:
        enc = encoding.strip().lower()
        self._d: Any
        if enc in ("gzip", "x-gzip"):
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            self._d = zlib.decompressobj()
        elif enc == "br":
            self._d = brotli.Decompressor()
        elif enc == "zstd":
            self._d = zstandard.ZstdDecompressor().decompressobj()
        else:
            raise ValueError(f"unsupported encoding {encoding!r}")
        self._brotli = enc == "br"

    def feed(self, data: bytes) -> bytes:
        return bytes(self._d.process(data) if self._brotli else self._d.decompress(data))
