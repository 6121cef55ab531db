"""How one call's bytes are shaped on the way up and back down.

The relay is protocol-agnostic; an Exchange decides what goes upstream and what the client sees.
Passthrough is byte-faithful; other exchanges (token ids, translation) live beside it.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.record import Call


class Exchange(Protocol):
    upstream_path: str
    upstream_body: bytes
    # False when the client must receive exactly the upstream's bytes and headers.
    rewrites: bool

    def chunk(self, data: bytes) -> bytes:
        """Client-facing bytes for one upstream stream chunk (may be empty while buffering)."""

    def end(self) -> bytes:
        """Bytes to send after the upstream stream ended cleanly."""

    def body(self, data: bytes, status: int) -> bytes:
        """Client-facing body for a non-streamed response with the upstream's `status`."""


class Passthrough:
    rewrites = False

    def __init__(self, upstream_path: str, raw_body: bytes) -> None:
        self.upstream_path = upstream_path
        self.upstream_body = raw_body

    def chunk(self, data: bytes) -> bytes:
        return data

    def end(self) -> bytes:
        return b""

    def body(self, data: bytes, status: int) -> bytes:
        return data


class ExchangeFactory(Protocol):
    def __call__(
        self, call: Call, upstream_path: str, raw_body: bytes, body: dict[str, Any] | None
    ) -> Exchange:
        """Choose the exchange for a validated request."""


def passthrough(call: Call, upstream_path: str, raw_body: bytes, body: dict[str, Any] | None) -> Exchange:
    return Passthrough(upstream_path, raw_body)
