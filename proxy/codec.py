"""Content-Encoding handling: the CLIs advertise gzip, br and zstd; bodies are recorded decoded.

`decode_iter` undoes every layer of an encoding (`gzip, gzip` is two) with a running limit: each layer stops
inflating as soon as its output passes the limit, so a 2 KB body that would inflate to 1 GiB costs no more
than the limit in memory and time. It is plain blocking code: the relay runs it in a worker thread.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import brotli
import zstandard

from proxy.errors import ProxyError

MAX_LAYERS = 4
_STEP = 1 << 20  # output per inflate call: the granularity of the limit check
_ZSTD_WINDOW = 1 << 25  # a frame may ask for a 2 GiB window; refuse more than 32 MiB


class TooLarge(ProxyError, ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"decoded body exceeds the {limit}-byte limit")
        self.limit = limit


class Unsupported(ProxyError, ValueError):
    pass


def layers(encoding: str | None) -> list[str]:
    """The encodings applied, in order (identity dropped). Raises Unsupported for unknown or too many."""
    found = [e.strip().lower() for e in (encoding or "").split(",")]
    found = [e for e in found if e and e != "identity"]
    for enc in found:
        if enc not in _LAYERS:
            raise Unsupported(f"unsupported content-encoding {enc!r}")
    if len(found) > MAX_LAYERS:
        raise Unsupported(f"content-encoding has {len(found)} layers; at most {MAX_LAYERS} are accepted")
    return found


def decode_iter(pieces: Iterable[bytes], encoding: str | None, limit: int) -> Iterator[bytes]:
    """Decoded bytes of `pieces`; raises TooLarge past `limit` bytes at any layer, ValueError on bad data."""
    it: Iterable[bytes] = pieces
    for enc in reversed(layers(encoding)):
        it = _LAYERS[enc](it, limit)
    total = 0
    for piece in it:
        total += len(piece)
        if total > limit:
            raise TooLarge(limit)
        yield piece


def decode_body(data: bytes, encoding: str | None, limit: int = 1 << 62) -> tuple[bytes, str | None]:
    """Decode `data` per its Content-Encoding; on failure return the raw bytes and a reason."""
    if not data or not encoding:
        return data, None
    try:
        return b"".join(decode_iter([data], encoding, limit)), None
    except (ValueError, OSError, zlib.error, brotli.error, zstandard.ZstdError) as exc:
        return data, f"cannot decode content-encoding {encoding!r}: {exc}"


def _zlib(src: Iterable[bytes], limit: int, wbits: int, members: bool) -> Iterator[bytes]:
    d = zlib.decompressobj(wbits)
    produced = 0
    for data in src:
        buf = data
        while buf:
            if d.eof:
                if not members or not buf.strip(b"\0"):
                    break  # trailing bytes after the end of the stream are ignored, as zlib does
                d = zlib.decompressobj(wbits)  # the next gzip member
            piece = d.decompress(buf, min(_STEP, limit - produced + 1))
            produced += len(piece)
            if produced > limit:
                raise TooLarge(limit)
            if piece:
                yield piece
            buf = d.unused_data if d.eof else d.unconsumed_tail
    while not d.eof:  # output zlib still holds for input it has already taken
        piece = d.decompress(b"", min(_STEP, limit - produced + 1))
        if not piece:
            raise ValueError("compressed data ended before the end of the stream")
        produced += len(piece)
        if produced > limit:
            raise TooLarge(limit)
        yield piece


def _gzip(src: Iterable[bytes], limit: int) -> Iterator[bytes]:
    return _zlib(src, limit, 16 + zlib.MAX_WBITS, members=True)


def _deflate(src: Iterable[bytes], limit: int) -> Iterator[bytes]:
    """`deflate` is meant to be zlib-wrapped, but some clients send a raw stream: tell them apart."""
    it = iter(src)
    first = b""
    for first in it:
        if first:
            break
    wrapped = len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
    rest = _chain(first, it)
    return _zlib(rest, limit, zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS, members=False)


def _brotli(src: Iterable[bytes], limit: int) -> Iterator[bytes]:
    d = brotli.Decompressor()
    produced = 0
    for data in src:
        piece = d.process(data, output_buffer_limit=_STEP)
        while piece:
            produced += len(piece)
            if produced > limit:
                raise TooLarge(limit)
            yield piece
            piece = d.process(b"", output_buffer_limit=_STEP)
    if not d.is_finished():
        raise ValueError("brotli data ended before the end of the stream")


class _Reader(io.RawIOBase):
    """A file over an iterator of byte strings (what zstandard's bounded stream reader wants)."""

    def __init__(self, src: Iterable[bytes]) -> None:
        self._it, self._buf = iter(src), b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            nxt = next(self._it, None)
            if nxt is None:
                return 0
            self._buf = nxt
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _zstd(src: Iterable[bytes], limit: int) -> Iterator[bytes]:
    d = zstandard.ZstdDecompressor(max_window_size=_ZSTD_WINDOW)
    produced = 0
    source: Any = _Reader(src)
    with d.stream_reader(source, read_across_frames=True, closefd=False) as reader:
        while piece := reader.read(min(_STEP, limit - produced + 1)):
            produced += len(piece)
            if produced > limit:
                raise TooLarge(limit)
            yield piece


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


_LAYERS: dict[str, Callable[[Iterable[bytes], int], Iterator[bytes]]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    "br": _brotli,
    "zstd": _zstd,
}


class StreamDecoder:
    """Incremental Content-Encoding decoder for a stream the relay must read (an upstream that ignored
    `accept-encoding: identity`); the upstream is trusted, so no limit applies here."""

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
