"""Relay one request to the upstream and record it. Streams are passed on chunk by chunk.

On the path of a stream chunk the relay only appends the chunk to a list: no disk I/O and no
JSON work. The call is recorded, and awaited durable, after the last chunk but before the
response ends, so a client that saw the end of a response can rely on its record being on disk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy import errors
from proxy.attribution import agent_from_user_agent, agent_session_id
from proxy.codec import StreamDecoder, decode_body
from proxy.config import ProxySettings
from proxy.exchange import Exchange, ExchangeFactory, passthrough
from proxy.metrics import ProxyMetrics
from proxy.record import Call
from proxy.routes import Match, family_for_path, match
from proxy.sink import CallSink, durable
from proxy.upstream import UpstreamClients
from proxy.validate import Rejected, parse_json_body, read_body

log = logging.getLogger(__name__)

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length",
}  # fmt: skip
CLIENT_KEY_HEADERS = ("authorization", "x-api-key", "api-key")


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
        self._keys = set(settings.client_keys)

    async def handle(self, request: Request) -> Response:
        m = match(request.method, request.url.path)
        if m is None:
            self.metrics.requests.labels("unknown", "404").inc()
            msg = f"no route for {request.method} {request.url.path}; nothing was forwarded"
            return _error(family_for_path(request.url.path), 404, msg)
        call = self._new_call(request, m)
        self.metrics.in_flight.inc()
        try:
            return await self._handle(request, m, call)
        finally:
            self.metrics.in_flight.dec()

    def _new_call(self, request: Request, m: Match) -> Call:
        query = request.url.query
        h = request.headers
        return Call(
            method=request.method,
            path=m.upstream_path + (f"?{query}" if query else ""),
            api=m.route.api.value,
            upstream=self.settings.upstream,
            proxy_id=self.settings.proxy_id,
            session_id=m.session_id,
            agent=agent_from_user_agent(h.get("user-agent")),
            agent_session_id=agent_session_id(h),
            user_agent=h.get("user-agent"),
            tag=h.get("x-dflash-tag"),
        )

    async def _handle(self, request: Request, m: Match, call: Call) -> Response:
        family = m.route.family
        try:
            self._check_key(request)
            raw = await read_body(request, self.settings.max_body_bytes) if request.method == "POST" else b""
            self.metrics.request_bytes.inc(len(raw))
            body = None
            if request.method == "POST":
                body, call.request_body = parse_json_body(
                    raw, request.headers.get("content-encoding"), m.route, self.settings.max_body_bytes
                )
                call.model, call.stream = body.get("model"), bool(body.get("stream", False))
            exchange = self.exchange(call, m.upstream_path, raw, body)
        except Rejected as rej:
            return await self._reject(call, family, rej.status, rej.reason)
        if exchange.upstream_body is not raw:
            call.upstream_request_body = exchange.upstream_body
        return await self._forward(request, call, family, exchange)

    def _check_key(self, request: Request) -> None:
        if not self._keys:
            return
        h = request.headers
        offered = [h.get(n, "").removeprefix("Bearer ").strip() for n in CLIENT_KEY_HEADERS]
        if not self._keys.intersection(offered):
            raise Rejected(401, "missing or unknown API key")

    async def _reject(self, call: Call, family: str, status: int, reason: str) -> Response:
        call.status_code = status
        call.finish("rejected", reason)
        await self._record(call, wait=True)
        return _error(family, status, reason)

    def _upstream_headers(self, request: Request, call: Call, exchange: Exchange) -> list[tuple[str, str]]:
        drop = HOP_BY_HOP | set(CLIENT_KEY_HEADERS) | {"x-dflash-tag"}
        if exchange.rewrites:
            drop |= {"content-encoding", "accept-encoding"}  # we must read what comes back
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in drop]
        if "accept-encoding" not in request.headers or exchange.rewrites:
            headers.append(("accept-encoding", "identity"))  # else httpx would ask for compression itself
        key = self.settings.upstream_key
        if key is not None:
            headers.append(("authorization", f"Bearer {key.get_secret_value()}"))
            if call.api.startswith("anthropic"):
                headers.append(("x-api-key", key.get_secret_value()))
        return headers

    async def _forward(self, request: Request, call: Call, family: str, exchange: Exchange) -> Response:
        # The client's query string belongs to its own route (Claude Code's `?beta=true`), not to a
        # translated one.
        query = request.url.query if call.path.startswith(exchange.upstream_path) else ""
        url = self.settings.upstream + exchange.upstream_path + (f"?{query}" if query else "")
        client = self.client.pick()
        up_req = client.build_request(
            request.method,
            url,
            headers=self._upstream_headers(request, call, exchange),
            content=exchange.upstream_body if request.method == "POST" else None,
        )
        try:
            resp = await client.send(up_req, stream=True)
        except httpx.TimeoutException as exc:
            return await self._upstream_failed(call, family, 504, "timeout", f"upstream timed out: {exc!r}")
        except httpx.HTTPError as exc:
            return await self._upstream_failed(
                call, family, 502, "upstream_error", f"upstream unreachable: {exc!r}"
            )
        call.first_byte_at = time.time()
        self.metrics.ttfb.observe(call.first_byte_at - call.started_at)
        call.status_code = resp.status_code
        call.response_encoding = resp.headers.get("content-encoding")
        call.response_content_type = resp.headers.get("content-type")
        if resp.status_code >= 400:
            call.outcome, call.error = "upstream_error", f"upstream answered {resp.status_code}"
        headers = _response_headers(resp, exchange)
        if "text/event-stream" in (call.response_content_type or ""):
            return StreamingResponse(self._stream(call, resp, exchange), resp.status_code, headers)
        return await self._whole(call, family, resp, exchange, headers)

    async def _whole(
        self, call: Call, family: str, resp: httpx.Response, exchange: Exchange, headers: dict[str, str]
    ) -> Response:
        try:
            async for chunk in resp.aiter_raw():
                call.response_chunks.append(chunk)
        except httpx.HTTPError as exc:
            reason = f"upstream failed while sending the body: {exc!r}"
            return await self._upstream_failed(call, family, 502, "upstream_error", reason)
        finally:
            await resp.aclose()
        data = b"".join(call.response_chunks)
        if exchange.rewrites and call.response_encoding:  # asked for identity, got encoded anyway
            data = decode_body(data, call.response_encoding)[0]
        try:
            body = exchange.body(data, resp.status_code)
        except Exception as exc:  # a reply the exchange could not handle must not take the proxy down
            log.exception("relaying call %s failed", call.call_id)
            reason = f"proxy could not relay the upstream reply: {exc!r}"
            return await self._upstream_failed(call, family, 502, "upstream_error", reason)
        call.finish()
        await self._record(call, wait=True)
        self.metrics.response_bytes.inc(len(body))
        return Response(body, resp.status_code, headers)

    async def _stream(self, call: Call, resp: httpx.Response, exchange: Exchange) -> AsyncIterator[bytes]:
        sent = 0
        wait = True
        decoder = (
            StreamDecoder(call.response_encoding) if exchange.rewrites and call.response_encoding else None
        )
        # An injected error event is only readable by the client in a stream it gets uncompressed.
        readable = exchange.rewrites or not call.response_encoding
        try:
            async for chunk in resp.aiter_raw():
                call.response_chunks.append(chunk)
                out = exchange.chunk(decoder.feed(chunk) if decoder else chunk)
                if out:
                    sent += len(out)
                    yield out
            tail = exchange.end()
            if tail:
                sent += len(tail)
                yield tail
            call.finish()
        except httpx.HTTPError as exc:
            call.finish("upstream_error", f"upstream stream broke: {exc!r}")
            if readable:
                yield errors.stream_error_event(call.api, "upstream connection lost mid-stream")
        except Exception as exc:  # a stream the exchange could not handle must not take the proxy down
            log.exception("relaying call %s failed", call.call_id)
            call.finish("upstream_error", f"proxy could not relay the upstream stream: {exc!r}")
            if readable:
                yield errors.stream_error_event(call.api, "proxy could not relay the upstream stream")
        except BaseException:  # cancelled or closed: the client went away
            call.finish("client_disconnected", "client disconnected before the end of the stream")
            wait = False
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await resp.aclose()
                self.metrics.response_bytes.inc(sent)
                await self._record(call, wait=wait)

    async def _upstream_failed(
        self, call: Call, family: str, status: int, outcome: str, reason: str
    ) -> Response:
        call.status_code = status
        call.finish(outcome, reason)
        await self._record(call, wait=True)
        return _error(family, status, reason)

    async def _record(self, call: Call, *, wait: bool) -> None:
        self.metrics.requests.labels(call.api, str(call.status_code)).inc()
        fut = self.sink.submit(call)
        if wait:
            await durable(fut)


def _response_headers(resp: httpx.Response, exchange: Exchange) -> dict[str, str]:
    drop = HOP_BY_HOP | ({"content-encoding"} if exchange.rewrites else set())
    return {k: v for k, v in resp.headers.items() if k.lower() not in drop}


def _error(family: str, status: int, reason: str) -> Response:
    return Response(errors.error_body(family, status, reason), status, media_type="application/json")
