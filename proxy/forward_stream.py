"""A streamed reply relayed as it arrives (proxy/forward.py starts it): each chunk recorded and passed on, the
stream ended only once its record is durable, or with the API's error event (docs at proxy/forward.py)."""

from __future__ import annotations

import logging

import anyio
import httpx

from proxy import errors
from proxy.asgi import Flight, Responder
from proxy.codec import StreamDecoder
from proxy.exchange import Exchange
from proxy.record import Call
from proxy.relaying import FINAL_SEND_S, Relaying, ResponseBody, SpillFailed, ends

log = logging.getLogger("proxy.forward")  # the same logger the whole-reply path writes to


async def relay_stream(
    relay: Relaying,
    out: Responder,
    call: Call,
    resp: httpx.Response,
    exchange: Exchange,
    headers: list[tuple[bytes, bytes]],
    flight: Flight,
) -> None:
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
            event = ends(call, "timeout", f"upstream went quiet mid-stream: {exc!r}", "upstream timed out")
        except httpx.HTTPError as exc:
            event = ends(
                call,
                "upstream_error",
                f"upstream stream broke: {exc!r}",
                "upstream connection lost mid-stream",
            )
        except SpillFailed as exc:
            relay.sink.report(exc.error)
            event = ends(call, "upstream_error", str(exc), f"{exc}; retry")
        except Exception as exc:  # a stream the exchange could not handle must not take the proxy down
            log.exception("relaying call %s failed", call.call_id)
            event = ends(
                call,
                "upstream_error",
                f"proxy could not relay the upstream stream: {exc!r}",
                "proxy could not relay the upstream stream",
            )
    if scope.cancelled_caught:
        event = _stream_cut(relay, call, out, flight)
    await _close_stream(relay, out, call, resp, event if readable else None, readable)


def _stream_cut(relay: Relaying, call: Call, out: Responder, flight: Flight) -> bytes | None:
    delivered = f"{out.delivered} bytes of the response had been delivered"
    if flight.cut_by == "client":
        call.finish("client_disconnected", f"client disconnected; {delivered}")
        return None
    deadline = relay.settings.shutdown_timeout_s
    error = f"cut at the proxy's shutdown deadline ({deadline:g} s); {delivered}"
    return ends(call, "timeout", error, "the proxy is shutting down; retry")


async def _close_stream(
    relay: Relaying, out: Responder, call: Call, resp: httpx.Response, event: bytes | None, readable: bool
) -> None:
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(FINAL_SEND_S):
            await resp.aclose()
        relay.metrics.response_bytes.inc(out.delivered)
        if call.outcome == "client_disconnected":
            await relay.record(call, wait=False)
            return
        durable = await relay.record(call, wait=True)
        with anyio.move_on_after(FINAL_SEND_S):
            if not durable and event is None:
                if not readable:
                    return  # left unfinished: the client sees a broken stream, not a finished one
                event = errors.stream_error_event(call.api, "the proxy could not record this call; retry")
            if event is not None:
                await out.body(event)
            await out.end()
