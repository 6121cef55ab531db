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
from typing import Any

import anyio
import httpx

from proxy import errors
from proxy.asgi import Flight, Receive, Responder, watch_disconnect
from proxy.codec import decode_body
from proxy.exchange import Exchange
from proxy.forward_stream import relay_stream
from proxy.headers import response_headers, upstream_headers
from proxy.record import Call
from proxy.relaying import FINAL_SEND_S, Relaying, ResponseBody, SpillFailed
from proxy.validate import Rejected
from records.tags import REHEARSAL_HEADER, REHEARSAL_TAG
from wire import shape_of

log = logging.getLogger(__name__)


async def forward(
    relay: Relaying,
    scope: dict[str, Any],
    receive: Receive,
    out: Responder,
    call: Call,
    family: str,
    exchange: Exchange,
) -> None:
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


async def _exchange(
    relay: Relaying,
    scope: dict[str, Any],
    out: Responder,
    call: Call,
    family: str,
    exchange: Exchange,
    flight: Flight,
) -> None:
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
    if resp.headers.get(REHEARSAL_HEADER) and not call.tag:  # a rehearsal's scripted brain answered
        call.tag = REHEARSAL_TAG
    if resp.status_code >= 400:
        call.outcome, call.error = "upstream_error", f"upstream answered {resp.status_code}"
    headers = response_headers(resp.headers.raw, rewrites=exchange.rewrites)
    if "text/event-stream" in (call.response_content_type or ""):
        await relay_stream(relay, out, call, resp, exchange, headers, flight)
    else:
        await _whole(relay, out, call, family, resp, exchange, headers, flight)


def _request(
    relay: Relaying, scope: dict[str, Any], call: Call, exchange: Exchange
) -> tuple[httpx.AsyncClient, httpx.Request]:
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


async def _whole(
    relay: Relaying,
    out: Responder,
    call: Call,
    family: str,
    resp: httpx.Response,
    exchange: Exchange,
    headers: list[tuple[bytes, bytes]],
    flight: Flight,
) -> None:
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
    with anyio.CancelScope(shield=True), anyio.move_on_after(FINAL_SEND_S):
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


def _family(api: str) -> str | None:
    """The error and header family of the call's API (its shape's), None for a name no API has."""
    shape = shape_of(api)
    return shape.family if shape else None
