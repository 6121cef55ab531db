"""What an exchange with the upstream needs of the relay that accepted its call, and the response body it
fills (in memory up to a budget, then a spill file): shared by the whole-reply and the stream paths."""

from __future__ import annotations

from typing import Protocol

import anyio

from proxy import errors
from proxy.asgi import Flight, Responder
from proxy.config import ProxySettings
from proxy.errors import ProxyError
from proxy.metrics import ProxyMetrics
from proxy.record import Call, Spill
from proxy.sink import CallSink
from proxy.upstream import UpstreamClients
from proxy.validate import Rejected

FINAL_SEND_S = 5.0  # the longest the proxy waits on a client that stopped reading, once the call is over


class Relaying(Protocol):
    """What an exchange needs of the relay that accepted its call (`proxy.relay.Relay`, which imports
    proxy.forward: the relay is seen through this, so the two never import each other)."""

    settings: ProxySettings
    client: UpstreamClients
    sink: CallSink
    metrics: ProxyMetrics
    flights: set[Flight]

    async def reject(
        self, out: Responder, call: Call, family: str, rej: Rejected, *, unread: bool = False
    ) -> None: ...

    async def record(self, call: Call, *, wait: bool) -> bool: ...


class SpillFailed(ProxyError):
    def __init__(self, error: OSError) -> None:
        super().__init__(f"the proxy cannot record this call: {error.strerror or error}")
        self.error = error


class ResponseBody:
    """The response as it arrives: in memory up to a budget, then appended to a spill file."""

    def __init__(self, call: Call, relay: Relaying) -> None:
        self._call, self._dir = call, relay.sink.spill_dir
        self._budget, self._held = relay.settings.stream_memory_bytes, 0

    async def add(self, chunk: bytes) -> None:
        call = self._call
        call.response_chunks.append(chunk)
        self._held += len(chunk)
        if self._held <= self._budget or self._dir is None:
            return
        data = b"".join(call.response_chunks)
        call.response_chunks, self._held = [], 0
        try:
            if call.response_spill is None:
                call.response_spill = await anyio.to_thread.run_sync(Spill.create, self._dir)
            await anyio.to_thread.run_sync(call.response_spill.write, data)
        except OSError as exc:
            raise SpillFailed(exc) from exc


def ends(call: Call, outcome: str, error: str, message: str) -> bytes:
    call.finish(outcome, error)
    return errors.stream_error_event(call.api, message)
