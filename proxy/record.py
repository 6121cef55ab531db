"""One model call as the relay sees it, and its compact binary form in the spool.

The relay only appends raw byte chunks; everything that needs parsing (SSE assembly, usage,
token ids) happens later, when a spool segment rolls into Parquet.
"""

from __future__ import annotations

import json
import struct
import time
import uuid
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

OUTCOMES = ("ok", "rejected", "upstream_error", "timeout", "client_disconnected")
MAGIC = b"DFC1"
# magic, header len, request len, response len, upstream request len, crc32 of the rest
_FRAME = struct.Struct("<4sIIQII")


@dataclass
class Call:
    method: str
    path: str
    api: str
    upstream: str
    proxy_id: str
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    session_id: str | None = None
    agent: str = "other"
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
    # Extra facts a translating or tokenizing relay learns (e.g. ids from /tokenize).
    extra: dict[str, Any] = field(default_factory=dict)
    request_body: bytes = b""
    upstream_request_body: bytes | None = None
    response_chunks: list[bytes] = field(default_factory=list)

    def finish(self, outcome: str | None = None, error: str | None = None) -> None:
        if outcome is not None:
            self.outcome = outcome
        if error is not None:
            self.error = error
        self.finished_at = time.time()

    def encode(self) -> bytes:
        meta = asdict(self)
        for blob in ("request_body", "upstream_request_body", "response_chunks"):
            meta.pop(blob)
        header = json.dumps(meta, separators=(",", ":")).encode()
        response = b"".join(self.response_chunks)
        upstream_req = self.upstream_request_body or b""
        body = header + self.request_body + response + upstream_req
        has_upreq = 1 if self.upstream_request_body is not None else 0
        frame = _FRAME.pack(
            MAGIC, len(header), len(self.request_body), len(response), len(upstream_req) * 2 + has_upreq, 0
        )
        crc = zlib.crc32(frame[:-4] + body)
        return frame[:-4] + struct.pack("<I", crc) + body


def decode_stream(data: bytes) -> tuple[list[Call], int]:
    """Decode consecutive frames; stop at the first torn or corrupt one. Returns calls and bytes consumed."""
    calls: list[Call] = []
    pos = 0
    while pos + _FRAME.size <= len(data):
        magic, hlen, qlen, rlen, ulen2, crc = _FRAME.unpack_from(data, pos)
        ulen = ulen2 >> 1
        end = pos + _FRAME.size + hlen + qlen + rlen + ulen
        if magic != MAGIC or end > len(data):
            break
        body = data[pos + _FRAME.size : end]
        if zlib.crc32(data[pos : pos + _FRAME.size - 4] + body) != crc:
            break
        meta = json.loads(body[:hlen])
        call = Call(**meta)
        call.request_body = body[hlen : hlen + qlen]
        call.response_chunks = [body[hlen + qlen : hlen + qlen + rlen]]
        call.upstream_request_body = body[hlen + qlen + rlen :] if ulen2 & 1 else None
        calls.append(call)
        pos = end
    return calls, pos
