"""The spool's frame format: self-delimiting, checksummed records that a reader can skip past when damaged.

    head:  "DFC2" | meta u32 | request u64 | response u64 | upstream request u64 (len*2 + present) | crc32(head)
    body:  meta JSON | request | response | upstream request
    tail:  crc32(body)

The head carries its own checksum, so a reader trusts a frame's lengths before it reads the body; the body's
checksum comes last, so a writer can stream a large response into a frame without holding it in memory. A
frame that fails either check (a torn write, a bad disk block) is skipped: the reader looks for the next
"DFC2" whose head checks out and carries on. Frames written before this format ("DFC1": one checksum over
head and body) are still read.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAGIC = b"DFC2"
LEGACY_MAGIC = b"DFC1"
_HEAD = struct.Struct("<4sIQQQ")
_CRC = struct.Struct("<I")
HEAD_SIZE = _HEAD.size + _CRC.size
TAIL_SIZE = _CRC.size
_LEGACY = struct.Struct("<4sIIQII")  # magic, meta, request, response, upstream*2+flag, crc32(head+body)
_BLOCK = 1 << 20
# A length no writer produces: a head claiming more is damage even if its checksum matched by chance.
_MAX_PART = 1 << 40


def pieces(
    meta: bytes, request: bytes, response: Iterable[bytes], response_len: int, upstream: bytes | None
) -> Iterator[bytes]:
    """The frame as a sequence of byte strings; `response` is streamed, its length declared up front."""
    up_field = (len(upstream) * 2 + 1) if upstream is not None else 0
    head = _HEAD.pack(MAGIC, len(meta), len(request), response_len, up_field)
    yield head + _CRC.pack(zlib.crc32(head))
    crc = zlib.crc32(meta)
    crc = zlib.crc32(request, crc)
    yield meta + request
    seen = 0
    for piece in response:
        seen += len(piece)
        crc = zlib.crc32(piece, crc)
        yield piece
    if seen != response_len:
        raise ValueError(f"response changed while being framed: {seen} bytes, declared {response_len}")
    if upstream:
        crc = zlib.crc32(upstream, crc)
        yield upstream
    yield _CRC.pack(crc)


@dataclass
class Frame:
    """One good frame. A response longer than the reader's inline limit stays in the file: `response` is
    None and `response_at` gives (offset, length)."""

    offset: int
    end: int
    meta: bytes
    request: bytes
    response: bytes | None
    response_at: tuple[int, int]
    upstream: bytes | None


@dataclass
class Damage:
    """Bytes the reader could not use: a torn or corrupt frame, or garbage, from `offset` to `end`."""

    offset: int
    end: int


def scan(f: BinaryIO, size: int, inline_max: int = 8 << 20) -> Iterator[Frame | Damage]:
    """Every good frame of a segment of `size` bytes in order, with a `Damage` for each stretch skipped."""
    pos = 0
    while pos < size:
        frame = _read_at(f, pos, size, inline_max)
        if frame is not None:
            yield frame
            pos = frame.end
            continue
        nxt = _next_magic(f, pos + 1, size)
        yield Damage(pos, nxt)
        pos = nxt


def _read_at(f: BinaryIO, pos: int, size: int, inline_max: int) -> Frame | None:
    f.seek(pos)
    head = f.read(HEAD_SIZE)
    if head[:4] == LEGACY_MAGIC:
        return _read_legacy(f, pos, size)
    if len(head) < HEAD_SIZE or head[:4] != MAGIC:
        return None
    if _CRC.unpack_from(head, _HEAD.size)[0] != zlib.crc32(head[: _HEAD.size]):
        return None
    _, mlen, qlen, rlen, up_field = _HEAD.unpack_from(head)
    ulen = up_field >> 1
    if max(mlen, qlen, rlen, ulen) > _MAX_PART:
        return None
    body_at = pos + HEAD_SIZE
    end = body_at + mlen + qlen + rlen + ulen + TAIL_SIZE
    if end > size:
        return None
    meta_req = f.read(mlen + qlen)
    crc = zlib.crc32(meta_req)
    resp_at = body_at + mlen + qlen
    response: bytes | None = None
    if rlen <= inline_max:
        response = f.read(rlen)
        crc = zlib.crc32(response, crc)
    else:
        for block in read_range(f, resp_at, rlen):
            crc = zlib.crc32(block, crc)
    f.seek(resp_at + rlen)
    upstream = f.read(ulen)
    crc = zlib.crc32(upstream, crc)
    if _CRC.unpack(f.read(TAIL_SIZE))[0] != crc:
        return None
    return Frame(
        pos,
        end,
        meta_req[:mlen],
        meta_req[mlen:],
        response,
        (resp_at, rlen),
        upstream if up_field & 1 else None,
    )


def _read_legacy(f: BinaryIO, pos: int, size: int) -> Frame | None:
    f.seek(pos)
    head = f.read(_LEGACY.size)
    if len(head) < _LEGACY.size:
        return None
    _, hlen, qlen, rlen, up_field, crc = _LEGACY.unpack(head)
    ulen = up_field >> 1
    end = pos + _LEGACY.size + hlen + qlen + rlen + ulen
    if end > size or end - pos > (1 << 32):
        return None
    body = f.read(end - pos - _LEGACY.size)
    if zlib.crc32(head[:-4] + body) != crc:
        return None
    resp_at = pos + _LEGACY.size + hlen + qlen
    upstream = body[hlen + qlen + rlen :] if up_field & 1 else None
    return Frame(
        pos,
        end,
        body[:hlen],
        body[hlen : hlen + qlen],
        body[hlen + qlen : hlen + qlen + rlen],
        (resp_at, rlen),
        upstream,
    )


def _next_magic(f: BinaryIO, pos: int, size: int) -> int:
    """Offset of the next byte sequence that may start a frame, or `size`."""
    while pos < size:
        f.seek(pos)
        block = f.read(min(_BLOCK, size - pos))
        hits = [i for i in (block.find(MAGIC), block.find(LEGACY_MAGIC)) if i >= 0]
        if hits:
            return pos + min(hits)
        if pos + len(block) >= size:
            break
        pos += len(block) - 3  # a magic may straddle two blocks
    return size


def read_range(f: BinaryIO, offset: int, length: int, block: int = _BLOCK) -> Iterator[bytes]:
    """`length` bytes of `f` from `offset`, in blocks (the file position is not kept between blocks)."""
    done = 0
    while done < length:
        f.seek(offset + done)
        data = f.read(min(block, length - done))
        if not data:
            raise EOFError(f"file ended {length - done} bytes before the end of a frame")
        done += len(data)
        yield data
