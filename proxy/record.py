"""One model call as the relay sees it, and its frame in the spool (proxy/frames.py).

The relay only appends raw byte chunks; everything that needs parsing (SSE assembly, usage, token ids)
happens later, when a spool segment rolls into Parquet. A response larger than the relay's memory budget
moves to a `Spill` (an anonymous file in the spool folder) as it arrives, so a stream's memory is bounded
whatever its length; the spool writer copies it into the call's frame.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, BinaryIO

from proxy import frames
from records.agents import OTHER_AGENT

OUTCOMES = ("ok", "rejected", "upstream_error", "timeout", "client_disconnected")
_BLOCK = 1 << 20
_BLOBS = ("request_body", "upstream_request_body", "response_chunks", "response_spill", "handed_over")


class Spill:
    """Bytes kept in a file: an anonymous temp file the relay appends to, or a range of a spool segment."""

    def __init__(self, file: BinaryIO, offset: int = 0, length: int = 0, *, owned: bool = True) -> None:
        self.file, self.offset, self.length, self._owned = file, offset, length, owned

    @classmethod
    def create(cls, directory: Path) -> Spill:
        return cls(tempfile.TemporaryFile(dir=directory, prefix=".spill-"))

    def write(self, data: bytes) -> None:
        """Append (blocking: the relay calls this in a worker thread)."""
        os.pwrite(self.file.fileno(), data, self.offset + self.length)
        self.length += len(data)

    def blocks(self) -> Iterator[bytes]:
        return frames.read_range(self.file, self.offset, self.length, _BLOCK)

    def close(self) -> None:
        if self._owned:
            self.file.close()


@dataclass
class Call:
    method: str
    path: str
    api: str
    upstream: str
    proxy_id: str
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    session_id: str | None = None
    agent: str = OTHER_AGENT
    agent_session_id: str | None = None
    user_agent: str | None = None
    tag: str | None = None
    model: str | None = None
    stream: bool = False
    status_code: int | None = None
    outcome: str = "ok"
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    first_byte_at: float | None = None
    finished_at: float | None = None
    response_encoding: str | None = None
    response_content_type: str | None = None
    translated: bool = False
    dropped_fields: list[str] = field(default_factory=list)
    max_tokens_capped: int | None = None  # the completion limit sent when the proxy lowered the client's
    # Extra facts a translating or tokenizing relay learns (e.g. ids from /tokenize).
    extra: dict[str, Any] = field(default_factory=dict)
    request_body: bytes = b""
    upstream_request_body: bytes | None = None
    # The response is the spill's bytes (if any) followed by these chunks.
    response_chunks: list[bytes] = field(default_factory=list)
    response_spill: Spill | None = field(default=None, repr=False)
    # Set when the relay hands the call over without waiting: the sink's callback then releases the spill.
    handed_over: bool = field(default=False, repr=False, compare=False)

    def finish(self, outcome: str | None = None, error: str | None = None) -> None:
        if outcome is not None:
            self.outcome = outcome
        if error is not None:
            self.error = error
        self.finished_at = time.time()

    @property
    def response_size(self) -> int:
        spilled = self.response_spill.length if self.response_spill is not None else 0
        return spilled + sum(len(c) for c in self.response_chunks)

    def response_pieces(self) -> Iterator[bytes]:
        if self.response_spill is not None:
            yield from self.response_spill.blocks()
        yield from self.response_chunks

    def response_bytes(self) -> bytes:
        """The whole response in memory: for small ones (and tests)."""
        return b"".join(self.response_pieces())

    def frame(self) -> Iterator[bytes]:
        """This call's spool frame, piece by piece (the response streamed from its spill)."""
        meta = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _BLOBS}
        header = json.dumps(meta, separators=(",", ":")).encode()
        return frames.pieces(
            header, self.request_body, self.response_pieces(), self.response_size, self.upstream_request_body
        )

    def encode(self) -> bytes:
        return b"".join(self.frame())

    def release(self) -> None:
        """Drop the spill file (the call is in the spool, or will never be)."""
        if self.response_spill is not None:
            self.response_spill.close()


def from_frame(frame: frames.Frame, segment: BinaryIO) -> Call:
    call = Call(**json.loads(frame.meta))
    call.request_body = frame.request
    call.upstream_request_body = frame.upstream
    if frame.response is not None:
        call.response_chunks = [frame.response]
    else:
        offset, length = frame.response_at
        call.response_spill = Spill(segment, offset, length, owned=False)
    return call


def decode_stream(data: bytes) -> tuple[list[Call], int]:
    """Decode the good frames of `data` (damaged ones skipped). Returns calls and the end of the last one."""
    buf = io.BytesIO(data)
    calls, used = [], 0
    for item in frames.scan(buf, len(data)):
        if isinstance(item, frames.Frame):
            calls.append(from_frame(item, buf))
            used = item.end
    return calls, used
