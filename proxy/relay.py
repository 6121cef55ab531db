"""Relay one request to the upstream and record it: the checks before anything is forwarded.

Order of work for a call, cheapest first: the route, whether calls can be recorded at all (else 503), the
client key (before any body is read), the body (size and time limits), decoding and parsing (in a worker
thread when large), then the exchange (proxy/forward.py). Every request on a relayed route ends in a
record, rejected ones included (with what was read of the request, up to `rejected_body_bytes`); the only
exceptions are the 503s sent because the record could not be written. Client input never makes a 500.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any

import anyio

from proxy.asgi import ClientGone, Flight, Receive, Responder, Send, header, read_body, text
from proxy.attribution import agent_from_user_agent, agent_session_id
from proxy.auth import ClientKeys
from proxy.config import ProxySettings
from proxy.exchange import Exchange, ExchangeFactory, passthrough
from proxy.forward import forward
from proxy.metrics import ProxyMetrics
from proxy.record import Call
from proxy.routes import Match, Route, family_for_path, match
from proxy.sink import CallSink
from proxy.upstream import UpstreamClients
from proxy.validate import Rejected, parse_json_body

log = logging.getLogger(__name__)
_THREAD_PARSE = 64 * 1024  # bodies above this are decoded and parsed off the event loop


class Relay:
    def __init__(
        self,
        settings: ProxySettings,
        client: UpstreamClients,
        sink: CallSink,
        metrics: ProxyMetrics,
        exchange: ExchangeFactory = passthrough,
    ) -> None:
        self.settings, self.client, self.sink, self.metrics = settings, client, sink, metrics
        self.exchange = exchange
        self.keys = ClientKeys(settings.client_key)
        self.flights: set[Flight] = set()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        out = Responder(send)
        method, path = scope["method"], scope["path"]
        m = match(method, path)
        if m is None:
            self.metrics.requests.labels("unknown", "404").inc()
            msg = f"no route for {method} {path}; nothing was forwarded"
            await out.error(family_for_path(path), 404, msg)
            return
        call = _new_call(scope, m, self.settings)
        self.metrics.in_flight.inc()
        try:
            await self._serve(scope, receive, out, m, call)
        except Exception as exc:  # a proxy bug: the client still gets an answer, the call a record
            log.exception("call %s failed inside the proxy", call.call_id)
            if call.finished_at is None:
                call.status_code = 500
                call.finish("upstream_error", f"proxy error: {exc!r}")
                await self.record(call, wait=False)
            if not out.started:
                await out.error(m.route.family, 500, "internal proxy error; see the proxy's log")
        finally:
            self.metrics.in_flight.dec()
            if not call.handed_over:
                call.release()

    async def _serve(
        self, scope: dict[str, Any], receive: Receive, out: Responder, m: Match, call: Call
    ) -> None:
        family, headers = m.route.family, scope["headers"]
        health = self.sink.health
        if not health.ok:
            self.metrics.refused.labels("cannot_record").inc()
            await out.error(family, 503, health.reason or "the proxy cannot record calls", close=True)
            return
        raw = b""
        try:
            if not self.keys.allows(headers):
                raise Rejected(401, "missing or unknown API key")
            body = None
            if scope["method"] == "POST":
                s = self.settings
                length = header(headers, b"content-length")
                raw = await read_body(
                    receive, s.max_body_bytes, s.body_timeout_s, length, s.rejected_body_bytes
                )
                self.metrics.request_bytes.inc(len(raw))
                call.request_body = raw
                body, call.request_body = await _parse(raw, header(headers, b"content-encoding"), m.route, s)
                call.model, call.stream = body.get("model"), bool(body.get("stream", False))
            exchange = self._choose(call, m, raw, body)
        except Rejected as rej:
            await self.reject(out, call, family, rej, unread=not raw and scope["method"] == "POST")
            return
        except ClientGone as gone:
            call.request_body, call.status_code = gone.body, 499
            call.finish("client_disconnected", str(gone))
            await self.record(call, wait=False)
            return
        if exchange.upstream_body is not raw:
            call.upstream_request_body = exchange.upstream_body
        await forward(self, scope, receive, out, call, family, exchange)

    def _choose(self, call: Call, m: Match, raw: bytes, body: dict[str, Any] | None) -> Exchange:
        try:
            return self.exchange(call, m.upstream_path, raw, body)
        except Rejected:
            raise
        except RecursionError:
            raise Rejected(400, "request body is nested too deeply to translate") from None
        except Exception as exc:  # the translators' view of a request they cannot map is a client error
            log.warning("call %s: request cannot be translated", call.call_id, exc_info=True)
            raise Rejected(400, f"request cannot be translated for the upstream: {exc!r}") from None

    async def reject(
        self, out: Responder, call: Call, family: str, rej: Rejected, *, unread: bool = False
    ) -> None:
        call.status_code = rej.status
        keep = self.settings.rejected_body_bytes
        body = rej.body or call.request_body
        reason = rej.reason
        if len(body) > keep:
            reason += f" (the record keeps the first {keep} of {len(body)} bytes of the request)"
        call.request_body = body[:keep]
        call.finish("rejected", reason)
        await self.record(call, wait=True)
        await out.error(family, rej.status, rej.reason, close=unread or rej.status in (408, 413))

    async def record(self, call: Call, *, wait: bool) -> bool:
        """Hand the call to the sink; with `wait`, return whether it is durable."""
        self.metrics.requests.labels(call.api, str(call.status_code)).inc()
        try:
            fut = self.sink.submit(call)
        except Exception:
            log.exception("call %s could not be queued for recording", call.call_id)
            self.metrics.record_failures.inc()
            return False
        if not wait:
            call.handed_over = True  # the spill is read by the spool writer after this returns
            fut.add_done_callback(lambda f: self._done(call, f))
            return True
        try:
            await asyncio.wrap_future(fut)
        except Exception as exc:
            log.error("call %s was not recorded: %s", call.call_id, exc)
            self.metrics.record_failures.inc()
            return False
        return True

    def _done(self, call: Call, fut: concurrent.futures.Future[None]) -> None:
        call.release()
        if fut.exception() is not None:
            self.metrics.record_failures.inc()

    def begin_shutdown(self, deadline_s: float) -> None:
        """From now, calls in flight have `deadline_s`; then each is cut (an error event for a stream, a 503
        otherwise) and recorded."""
        asyncio.get_running_loop().call_later(deadline_s, self.cut_all)

    def cut_all(self) -> None:
        for flight in list(self.flights):
            flight.cut("shutdown")


async def _parse(
    raw: bytes, encoding: bytes | None, route: Route, s: ProxySettings
) -> tuple[dict[str, Any], bytes]:
    enc = encoding.decode("latin-1") if encoding is not None else None
    if len(raw) <= _THREAD_PARSE and enc is None:
        return parse_json_body(raw, enc, route, s.max_body_bytes)
    return await anyio.to_thread.run_sync(parse_json_body, raw, enc, route, s.max_body_bytes)


def _new_call(scope: dict[str, Any], m: Match, settings: ProxySettings) -> Call:
    query = scope.get("query_string") or b""
    h = {k.lower(): v for k, v in scope["headers"]}  # the last of repeated headers wins, as in attribution
    user_agent = text(h.get(b"user-agent"))
    ids = (b"x-", b"session", b"thread")
    texts = {k.decode("latin-1"): text(v, 256) or "" for k, v in h.items() if k.startswith(ids)}
    return Call(
        method=scope["method"],
        path=m.upstream_path + (f"?{query.decode('latin-1')}" if query else ""),
        api=m.route.api.value,
        upstream=settings.upstream,
        proxy_id=settings.proxy_id,
        session_id=m.session_id,
        agent=agent_from_user_agent(user_agent),
        agent_session_id=agent_session_id(texts),
        user_agent=user_agent,
        tag=text(h.get(b"x-dflash-tag"), 256),
    )
