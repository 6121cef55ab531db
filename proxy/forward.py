"""The exchange with the upstream for one checked call: a whole reply, or a stream relayed as it arrives.

Acknowledgment: a client sees the end of a response only once the call's record is durable. A whole reply is
sent after that; a stream's body is ended after that, and when the record cannot be written the stream gets
the API's error event instead (or, when the proxy cannot write into it, is left unfinished), so the client
never takes an unrecorded call for a finished one.

Cancellation: while the upstream is awaited or read, the client going away cuts the call at once (the
upstream request is closed, the record says `client_disconnected` and how much was delivered), and so does
the shutdown deadline (a stream ends with the API's error event, a whole reply becomes a 503).

Memory: a response is kept in memory up to `stream_memory_bytes`, the rest goes to a spill file in the
spool folder that the spool writer copies into the call's frame, so a stream costs the same whatever its size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

import anyio
import httpx

from proxy import errors
from proxy.asgi import Flight, Receive, Responder, watch_disconnect
from proxy.codec import StreamDecoder, decode_body
from proxy.config import ProxySettings
from proxy.errors import ProxyError
from proxy.exchange import Exchange
from proxy.headers import response_headers, upstream_headers
from proxy.metrics import ProxyMetrics
from proxy.record import Call, Spill
from proxy.sink import CallSink
from proxy.upstream import UpstreamClients
from proxy.validate import Rejected
from wire import shape_of

log = logging.getLogger(__name__)
_FINAL_SEND_S = 5.0  # the longest the proxy waits on a client that stopped reading, once the call is over


class Relaying(Protocol):
    """What an exchange needs of the relay that accepted its call (`proxy.relay.Relay`, which imports this
    module: the relay is seen through this, so the two never import each other)."""

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


async def forward(relay: Relaying, scope: dict[str, Any], receive: Receive, out: Responder, call: Call,
                  family: str, exchange: Exchange) -> None:  # fmt: skip
    flight = Flight()
    relay.flights.add(flight)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_disconnect, receive, flight, lambda: out.complete)
            try:
                await _exchange(relay, scope, out, call, family, exchange, flight)
            finally:
                tg.cancel_scope.cancel()
    finally:
        relay.flights.discard(flight)


async def _exchange(relay: Relaying, scope: dict[str, Any], out: Responder, call: Call, family: str,
                    exchange: Exchange, flight: Flight) -> None:  # fmt: skip
    try:
        client, request = _request(relay, scope, call, exchange)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        await relay.reject(out, call, family, Rejected(400, f"request cannot be sent upstream: {exc}"))
        return
    resp, failure = None, None
    with flight.scope():
        try:
            resp = await client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            failure = (504, "timeout", f"upstream timed out: {exc!r}")
        except httpx.HTTPError as exc:
            failure = (502, "upstream_error", f"upstream unreachable: {exc!r}")
    if resp is None:
        await _fail(relay, out, call, family, failure or _cut(relay, flight, "the upstream answered"))
        return
    call.first_byte_at = time.time()
    relay.metrics.ttfb.observe(call.first_byte_at - call.started_at)
    call.status_code = resp.status_code
    call.response_encoding = resp.headers.get("content-encoding")
    call.response_content_type = resp.headers.get("content-type")
    if resp.status_code >= 400:
        call.outcome, call.error = "upstream_error", f"upstream answered {resp.status_code}"
    headers = response_headers(resp.headers.raw, rewrites=exchange.rewrites)
    if "text/event-stream" in (call.response_content_type or ""):
        await _stream(relay, out, call, resp, exchange, headers, flight)
    else:
        await _whole(relay, out, call, family, resp, exchange, headers, flight)


def _request(relay: Relaying, scope: dict[str, Any], call: Call, exchange: Exchange) -> tuple[httpx.AsyncClient, httpx.Request]:  # fmt: skip
    url = httpx.URL(relay.settings.upstream + exchange.upstream_path)
    query = scope.get("query_string") or b""
    # The client's query string belongs to its own route (Claude Code's `?beta=true`), not to a translated one.
    if query and call.path.partition("?")[0] == exchange.upstream_path:
        url = url.copy_with(query=query)
    headers = upstream_headers(
        scope["headers"],
        rewrites=exchange.rewrites,
        anthropic=_family(call.api) == "anthropic",
        key=relay.settings.upstream_key,
    )
    content = exchange.upstream_body if scope["method"] == "POST" else None
    client = relay.client.pick()
    return client, client.build_request(scope["method"], url, headers=headers, content=content)


Failure = tuple[int, str, str]


def _cut(relay: Relaying, flight: Flight, before: str) -> Failure:
    if flight.cut_by == "client":
        return 499, "client_disconnected", f"client disconnected before {before}"
    deadline = relay.settings.shutdown_timeout_s
    return 503, "timeout", f"the proxy shut down ({deadline:g} s deadline) before {before}; retry"


async def _fail(relay: Relaying, out: Responder, call: Call, family: str, failure: Failure) -> None:
    status, outcome, reason = failure
    call.status_code = status
    call.finish(outcome, reason)
    if outcome == "client_disconnected":
        await relay.record(call, wait=False)
        return
    await relay.record(call, wait=True)
    await out.error(family, status, reason)


async def _whole(relay: Relaying, out: Responder, call: Call, family: str, resp: httpx.Response,
                 exchange: Exchange, headers: list[tuple[bytes, bytes]], flight: Flight) -> None:  # fmt: skip
    body = ResponseBody(call, relay)
    failure: Failure | None = None
    with flight.scope():
        try:
            async for chunk in resp.aiter_raw():
                await body.add(chunk)
        except httpx.TimeoutException as exc:
            failure = (504, "timeout", f"upstream stopped sending its reply: {exc!r}")
        except httpx.HTTPError as exc:
            failure = (502, "upstream_error", f"upstream failed while sending the body: {exc!r}")
        except SpillFailed as exc:
            relay.sink.report(exc.error)
            failure = (503, "upstream_error", str(exc))
    with anyio.CancelScope(shield=True), anyio.move_on_after(_FINAL_SEND_S):
        await resp.aclose()
    if failure is None and flight.cut_by is not None:
        failure = _cut(relay, flight, "the upstream finished its reply")
    if failure is None:
        try:
            status, pieces, length = _client_body(call, resp.status_code, exchange)
        except errors.BadReply as exc:
            failure = (502, "upstream_error", str(exc))
        except Exception as exc:  # a reply the exchange could not handle must not take the proxy down
            log.exception("relaying call %s failed", call.call_id)
            failure = (502, "upstream_error", f"proxy could not relay the upstream reply: {exc!r}")
    if failure is not None:
        await _fail(relay, out, call, family, failure)
        return
    call.finish()
    if not await relay.record(call, wait=True):
        reason = "the proxy could not record this call, so it was not relayed; retry"
        await out.error(family, 503, relay.sink.health.reason or reason)
        return
    relay.metrics.response_bytes.inc(length)
    await out.whole(status, headers, pieces, length)


def _client_body(call: Call, status: int, exchange: Exchange) -> tuple[int, Iterable[bytes], int]:
    if not exchange.rewrites:
        return status, call.response_pieces(), call.response_size
    data = call.response_bytes()
    if call.response_encoding:  # asked for identity, got encoded anyway
        data = decode_body(data, call.response_encoding)[0]
    body = exchange.body(data, status)
    return status, [body], len(body)


async def _stream(relay: Relaying, out: Responder, call: Call, resp: httpx.Response, exchange: Exchange,
                  headers: list[tuple[bytes, bytes]], flight: Flight) -> None:  # fmt: skip
    body = ResponseBody(call, relay)
    enc = call.response_encoding
    decoder = StreamDecoder(enc) if exchange.rewrites and enc else None
    # An injected error event is only readable by the client in a stream it gets uncompressed.
    readable = exchange.rewrites or not enc
    event: bytes | None = None
    await out.start(resp.status_code, headers)
    with flight.scope() as scope:
        try:
            async for chunk in resp.aiter_raw():
                await body.add(chunk)
                data = exchange.chunk(decoder.feed(chunk) if decoder else chunk)
                if data:
                    await out.body(data)
            tail = exchange.end()
            if tail:
                await out.body(tail)
            call.finish()
        except httpx.TimeoutException as exc:
            event = _ends(call, "timeout", f"upstream went quiet mid-stream: {exc!r}", "upstream timed out")
        except httpx.HTTPError as exc:
            event = _ends(call, "upstream_error", f"upstream stream broke: {exc!r}", "upstream connection lost mid-stream")  # fmt: skip
        except SpillFailed as exc:
            relay.sink.report(exc.error)
            event = _ends(call, "upstream_error", str(exc), f"{exc}; retry")
        except Exception as exc:  # a stream the exchange could not handle must not take the proxy down
            log.exception("relaying call %s failed", call.call_id)
            event = _ends(call, "upstream_error", f"proxy could not relay the upstream stream: {exc!r}",
                          "proxy could not relay the upstream stream")  # fmt: skip
    if scope.cancelled_caught:
        event = _stream_cut(relay, call, out, flight)
    await _close_stream(relay, out, call, resp, event if readable else None, readable)


def _family(api: str) -> str | None:
    """The error and header family of the call's API (its shape's), None for a name no API has."""
    shape = shape_of(api)
    return shape.family if shape else None


def _ends(call: Call, outcome: str, error: str, message: str) -> bytes:
    call.finish(outcome, error)
    return errors.stream_error_event(call.api, message)


def _stream_cut(relay: Relaying, call: Call, out: Responder, flight: Flight) -> bytes | None:
    delivered = f"{out.delivered} bytes of the response had been delivered"
    if flight.cut_by == "client":
        call.finish("client_disconnected", f"client disconnected; {delivered}")
        return None
    deadline = relay.settings.shutdown_timeout_s
    error = f"cut at the proxy's shutdown deadline ({deadline:g} s); {delivered}"
    return _ends(call, "timeout", error, "the proxy is shutting down; retry")


async def _close_stream(relay: Relaying, out: Responder, call: Call, resp: httpx.Response, event: bytes | None,
                        readable: bool) -> None:  # fmt: skip
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(_FINAL_SEND_S):
            await resp.aclose()
        relay.metrics.response_bytes.inc(out.delivered)
        if call.outcome == "client_disconnected":
            await relay.record(call, wait=False)
            return
        durable = await relay.record(call, wait=True)
        with anyio.move_on_after(_FINAL_SEND_S):
            if not durable and event is None:
                if not readable:
                    return  # left unfinished: the client sees a broken stream, not a finished one
                event = errors.stream_error_event(call.api, "the proxy could not record this call; retry")
            if event is not None:
                await out.body(event)
            await out.end()
