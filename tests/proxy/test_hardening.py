"""Issue 16's defects in the relay, each as the reproduction that failed before the fix (in-process: the app
with a MockTransport upstream; tests/proxy/test_limits_live.py has the ones that need a real server)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gzip
import json
import resource
import threading
import tracemalloc
from collections.abc import Awaitable, Iterable, Iterator
from typing import TypeVar

import httpx
import pytest
import zstandard

from proxy import codec
from proxy.config import ProxySettings
from proxy.parquet import to_row
from proxy.part import write_part
from proxy.sink import MemorySink, SpoolSink
from proxy.spool import Health
from tests.proxy.asgi_client import Endless, asgi_request, gzip_bomb
from tests.proxy.conftest import Chunks, proxied, proxied_app, reply, sse

MSG = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
OK = {
    "id": "msg_1",
    "type": "message",
    "content": [{"type": "text", "text": "yo"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
CHAT_OK = {
    "id": "c1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "yo"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 1},
}
CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "}}]}\n\n'


T = TypeVar("T")
HANG_GUARD_S = 60  # a hang guard only: what these tests check is what happened, not how fast


async def within(aw: Awaitable[T], what: str, timeout_s: float = HANG_GUARD_S) -> T:
    """`aw`'s result; a clear failure instead of a hung test when it never comes."""
    try:
        return await asyncio.wait_for(aw, timeout_s)
    except TimeoutError:
        pytest.fail(f"hang guard: {what} did not happen within {timeout_s} s")


def rows_ok(calls) -> None:
    """Every call converts to a row Arrow accepts (a bad string would stop its whole segment from rolling)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        write_part(calls, Path(d), "part-x.parquet")


# -- defect 2: decompression bomb ---------------------------------------------------------------------------


async def test_a_decompression_bomb_is_stopped_at_the_limit_off_the_event_loop(seen, monkeypatch):
    bomb = gzip_bomb()  # 1 GiB decoded
    assert len(bomb) < 10_000
    max_body = ProxySettings.model_fields["max_body_bytes"].default  # 32 MiB
    # Every gzip layer the relay runs is counted (bytes put out, the thread it ran on), and the first one to
    # put out a byte is held until the event loop has answered a /healthz: if the inflating ran on the event
    # loop, that answer could never come while it is held, and `answered_meanwhile` would be [False].
    real_gzip = codec._LAYERS["gzip"]
    produced: list[int] = []
    threads: set[int] = set()
    inflating, answered = threading.Event(), threading.Event()
    answered_meanwhile: list[bool] = []

    def counted(src: Iterable[bytes], limit: int) -> Iterator[bytes]:
        layer = len(produced)
        produced.append(0)
        for piece in real_gzip(src, limit):
            threads.add(threading.get_ident())
            produced[layer] += len(piece)
            if not inflating.is_set():
                inflating.set()
                answered_meanwhile.append(answered.wait(HANG_GUARD_S))
            yield piece

    monkeypatch.setitem(codec._LAYERS, "gzip", counted)
    loop_thread = threading.get_ident()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with proxied(lambda req: seen.append(req) or reply(200, OK)) as (client, sink):

        async def health_while_inflating() -> int:
            assert await asyncio.to_thread(inflating.wait, HANG_GUARD_S), "the body was never inflated"
            status = (await client.get("/healthz")).status_code
            answered.set()
            return status

        r, health = await within(
            asyncio.gather(
                client.post("/v1/messages", content=bomb, headers={"content-encoding": "gzip, gzip"}),
                health_while_inflating(),
            ),
            "the bomb's answer",
        )
    assert r.status_code == 413, r.text
    assert "limit" in r.json()["error"]["message"]
    # Both layers were undone, and each stopped at the 32 MiB limit instead of inflating 1 GiB.
    assert len(produced) == 2
    assert max(produced) <= max_body + codec._STEP, produced
    assert answered_meanwhile == [True], "the event loop did not answer /healthz while the bomb was inflating"
    assert health == 200
    assert loop_thread not in threads  # the inflating ran on a worker thread, never on the event loop's
    rss_growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert rss_growth_mib < 200, rss_growth_mib
    assert seen == []
    (call,) = sink.calls
    assert call.outcome == "rejected"
    assert call.status_code == 413


async def test_every_layer_of_an_encoding_is_undone_and_checked(seen):
    body = json.dumps(MSG).encode()
    twice = gzip.compress(zstandard.ZstdCompressor().compress(body))
    async with proxied(lambda req: seen.append(req) or reply(200, OK), max_body_bytes=10_000) as (
        client,
        sink,
    ):
        ok = await client.post("/v1/messages", content=twice, headers={"content-encoding": "zstd, gzip"})
        big = gzip.compress(gzip.compress(b'{"a":"' + b"x" * 20_000 + b'"}'))
        too_big = await client.post("/v1/messages", content=big, headers={"content-encoding": "gzip, gzip"})
        odd = await client.post("/v1/messages", content=body, headers={"content-encoding": "compress"})
    assert ok.status_code == 200
    assert seen[0].content == twice  # forwarded as sent
    assert json.loads(sink.calls[0].request_body) == MSG  # recorded decoded
    assert too_big.status_code == 413
    assert odd.status_code == 415
    assert [c.outcome for c in sink.calls] == ["ok", "rejected", "rejected"]


# -- defect 3: client-key auth -----------------------------------------------------------------------------


async def test_the_auth_scheme_is_case_insensitive_and_the_key_is_checked_before_the_body(seen):
    pulled: list[str] = []

    async def never_ending_body():
        pulled.append("the first chunk")
        yield b'{"model":'
        await asyncio.Event().wait()  # the rest never comes

    async with proxied(lambda req: seen.append(req) or reply(200, OK), client_key=["K1"]) as (client, sink):
        lower = await client.post("/v1/messages", json=MSG, headers={"authorization": "bearer K1"})
        upper = await client.post("/v1/messages", json=MSG, headers={"authorization": "BEARER K1"})
        basic = await client.post("/v1/messages", json=MSG, headers={"authorization": "Basic K1"})
        none = await client.post("/v1/messages", json=MSG)
        slow = await within(
            client.post("/v1/messages", content=never_ending_body()), "the 401 for a hung body"
        )
    assert (lower.status_code, upper.status_code) == (200, 200)
    assert (basic.status_code, none.status_code, slow.status_code) == (401, 401, 401)
    assert pulled == []  # the key was refused before a byte of the body was asked for (never waited for)
    assert len(seen) == 2
    assert [c.outcome for c in sink.calls] == ["ok", "ok", "rejected", "rejected", "rejected"]


# -- defect 4: 500s with no record ---------------------------------------------------------------------------

SURROGATE = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"cut \\ud83d here"}]}'
CHAT_SURROGATE = b'{"model":"m","messages":[{"role":"user","content":"cut \\ud83d here"}]}'


@pytest.mark.parametrize("upstream_api", ["native", "chat"])
async def test_a_lone_surrogate_is_relayed_faithfully_and_recorded(seen, upstream_api):
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return reply(200, CHAT_OK if upstream_api == "chat" or "chat" in req.url.path else OK)

    async with proxied(handler, upstream_api=upstream_api) as (client, sink):
        msgs = await client.post("/v1/messages", content=SURROGATE)
        chat = await client.post("/v1/chat/completions", content=CHAT_SURROGATE)  # rewritten: token ids
    assert (msgs.status_code, chat.status_code) == (200, 200), (msgs.text, chat.text)
    for req in seen:
        assert b"\\ud83d" in req.content  # the escape went upstream as the client wrote it
        json.loads(req.content)
    if upstream_api == "native":
        assert seen[0].content == SURROGATE
    assert [c.outcome for c in sink.calls] == ["ok", "ok"]
    rows_ok(sink.calls)


async def test_malformed_inputs_that_made_500s_are_4xx_with_a_record(seen):
    deep = b'{"model":"m","max_tokens":5,"messages":' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    cases = [
        ("/v1/messages", json.dumps({**MSG, "max_tokens": None}).encode(), 400, "max_tokens"),
        ("/v1/messages", deep, 400, "nested"),
        (
            "/v1/chat/completions",
            b'{"model":"m","messages":' + b"[" * 10_000 + b"]" * 10_000 + b"}",
            400,
            "nested",
        ),
        ("/v1/messages", json.dumps({**MSG, "model": None}).encode(), 400, "model"),
        ("/v1/responses", json.dumps({"model": "m", "input": None, "stream": None}).encode(), 200, None),
    ]
    async with proxied(lambda req: seen.append(req) or reply(200, OK)) as (client, sink):
        for path, body, status, word in cases:
            r = await client.post(path, content=body)
            assert r.status_code == status, (path, body[:60], r.text)
            if word:
                assert word in r.json()["error"]["message"]
        assert (await client.get("/healthz")).status_code == 200
    assert [c.outcome for c in sink.calls] == ["rejected"] * 4 + ["ok"]
    rows_ok(sink.calls)


async def test_non_ascii_header_values_are_relayed_as_bytes_and_recorded(seen):
    ua = "claude-cli/2.1 (café ☕)".encode()
    async with proxied(lambda req: seen.append(req) or reply(200, OK)) as (client, sink):
        r = await client.post(
            "/v1/messages",
            json=MSG,
            headers=[(b"x-note", "café".encode()), (b"user-agent", ua), (b"x-latin", b"caf\xe9")],
        )
    assert r.status_code == 200
    raw = dict(seen[0].headers.raw)
    assert raw[b"x-note"] == "café".encode()
    assert raw[b"user-agent"] == ua
    assert raw[b"x-latin"] == "café".encode()  # not UTF-8: relayed as its Latin-1 reading (proxy/headers.py)
    (call,) = sink.calls
    assert call.user_agent == ua.decode()
    assert call.agent == "claude-code"
    rows_ok(sink.calls)


async def test_a_client_that_hangs_up_during_the_upload_is_recorded(seen):
    async with proxied_app(lambda req: seen.append(req) or reply(200, OK)) as app:
        ex = await asgi_request(
            app,
            "POST",
            "/s/up/v1/messages",
            [b'{"model":"m",', b'"max_tokens":'],
            incomplete_upload=True,
            hang_up_after=0.1,
        )
        sink = app.state.sink
    assert ex.status is None  # nobody to answer
    assert seen == []
    (call,) = sink.calls
    assert (call.outcome, call.status_code, call.session_id) == ("client_disconnected", 499, "up")
    assert call.request_body == b'{"model":"m","max_tokens":'
    rows_ok(sink.calls)


async def test_a_rejected_request_is_recorded_with_its_body_cut_to_the_limit():
    junk = b"{" + b"x" * 100_000
    async with proxied(lambda req: reply(200, OK), rejected_body_bytes=1000) as (client, sink):
        r = await client.post("/v1/messages", content=junk)
    assert r.status_code == 400
    (call,) = sink.calls
    assert call.request_body == junk[:1000]
    assert "first 1000 of 100001 bytes" in (call.error or "")
    assert to_row(call, zstandard.ZstdCompressor())["request_json"] == junk[:1000].decode()


# -- defect 5: a response the client never received is not `ok`; the upstream is cancelled -------------------


async def test_a_client_that_goes_away_mid_stream_cancels_the_upstream_at_once():
    stream = Endless(CHUNK)
    upstream = httpx.MockTransport(
        lambda req: httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})
    )
    async with proxied_app(upstream) as app:
        body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
        ex = await within(
            asgi_request(app, "POST", "/v1/chat/completions", [body], hang_up_after=0.3, keep_body=False),
            "the relay's return after the client hung up on an endless stream",
        )
        sink = app.state.sink
    assert stream.closed_at is not None  # the upstream was let go of (it never ends by itself)
    (call,) = sink.calls
    assert call.outcome == "client_disconnected"
    assert call.error is not None
    assert "bytes of the response had been delivered" in call.error
    delivered = int(call.error.split("; ")[1].split()[0])  # handed to the connection: at most a chunk more
    assert ex.received <= delivered <= ex.received + 2 * len(CHUNK)
    # Cancelled at once, not pulled on: the upstream gave at most one chunk more than reached the connection.
    assert stream.sent <= delivered // len(CHUNK) + 1, (stream.sent, delivered // len(CHUNK))


async def test_a_client_that_goes_away_while_the_upstream_thinks_cancels_it():
    cancelled = []

    async def thinking(req: httpx.Request) -> httpx.Response:
        try:
            await asyncio.Event().wait()  # never answers: only a cancellation ends this
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return reply(200, OK)

    async with proxied_app(httpx.MockTransport(thinking)) as app:
        ex = await within(
            asgi_request(app, "POST", "/v1/messages", [json.dumps(MSG).encode()], hang_up_after=0.2),
            "the relay's return after the client hung up on a silent upstream",
        )
        sink = app.state.sink
    assert ex.status is None
    assert cancelled == [True]  # the upstream request was cancelled because the client went away
    (call,) = sink.calls
    assert (call.outcome, call.status_code) == ("client_disconnected", 499)


# -- defect 7: a stream's memory does not grow with its length ----------------------------------------------


async def test_a_long_stream_is_relayed_in_bounded_memory(tmp_path):
    chunk = CHUNK * 600  # ~64 KiB
    n = 800  # ~50 MiB in all
    stream = Endless(chunk, every_s=0, limit=n)
    upstream = httpx.MockTransport(
        lambda req: httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})
    )
    sink = SpoolSink(
        tmp_path / "spool", tmp_path / "calls", "p", max_records=10, max_bytes=1 << 30, max_age_s=3600
    )
    async with proxied_app(upstream, sink=sink, data_dir=tmp_path) as app:
        body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
        tracemalloc.start()
        try:
            ex = await asgi_request(app, "POST", "/v1/chat/completions", [body], keep_body=False)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert ex.status == 200
    assert ex.received == len(chunk) * n
    assert peak < 8 * 1024 * 1024, peak  # the relay held at most a few MiB of a 50 MiB stream


# -- defect 10: the shutdown deadline --------------------------------------------------------------------------


async def test_at_the_shutdown_deadline_a_stream_gets_the_apis_error_event_and_a_record():
    stream = Endless(b'event: ping\ndata: {"type":"ping"}\n\n', every_s=0.05)
    upstream = httpx.MockTransport(
        lambda req: httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})
    )
    async with proxied_app(upstream) as app:
        app.state.relay.begin_shutdown(0.3)
        ex = await within(
            asgi_request(app, "POST", "/v1/messages", [json.dumps({**MSG, "stream": True}).encode()]),
            "the end of an endless stream at the shutdown deadline",
        )
        sink = app.state.sink
    assert ex.ended  # the stream never ends by itself: the deadline's cut ended it
    assert bytes(ex.body).rstrip().endswith(b"}")
    last = bytes(ex.body).strip().split(b"\n\n")[-1]
    assert last.startswith(b"event: error")
    assert "shutting down" in last.decode()
    (call,) = sink.calls
    assert call.outcome == "timeout"
    assert "shutdown deadline" in (call.error or "")


# -- a record that cannot be made is never acknowledged; nothing is relayed that cannot be recorded ----------


class _BrokenSink(MemorySink):
    def __init__(self, health: Health = Health(True)) -> None:
        super().__init__()
        self.health = health  # type: ignore[misc]

    def submit(self, call):
        self.calls.append(call)
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        fut.set_exception(OSError(28, "No space left on device"))
        return fut


async def test_a_call_whose_record_fails_is_not_acknowledged():
    stream_body = sse(
        (None, json.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": "a"}}]})),
        (None, "[DONE]"),
    )

    def handler(req: httpx.Request) -> httpx.Response:
        if json.loads(req.content).get("stream"):
            return reply(200, stream_body, "text/event-stream")
        return reply(200, CHAT_OK)

    async with proxied_app(handler, sink=_BrokenSink()) as app:
        whole = await asgi_request(app, "POST", "/v1/chat/completions", [b'{"model":"m","messages":[]}'])
        streamed = await asgi_request(
            app, "POST", "/v1/chat/completions", [b'{"model":"m","messages":[],"stream":true}']
        )
    assert whole.status == 503
    assert "not relayed" in whole.json()["error"]["message"]
    assert streamed.status == 200
    last = bytes(streamed.body).strip().split(b"\n\n")[-1]
    assert b"could not record" in last


async def test_when_calls_cannot_be_recorded_the_proxy_says_so_and_relays_nothing(seen):
    sink = _BrokenSink(Health(False, "cannot record calls: disk full in /data/spool", 0))
    async with proxied_app(lambda req: seen.append(req) or reply(200, OK), sink=sink) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
            r = await client.post("/v1/messages", json=MSG)
            health = await client.get("/healthz")
    assert r.status_code == 503
    assert "disk full" in r.json()["error"]["message"]
    assert health.status_code == 503
    assert health.json()["recording"]["reason"].endswith("disk full in /data/spool")
    assert seen == []


# -- defect 11 (minor) -----------------------------------------------------------------------------------------


async def test_a_tokenize_reply_of_the_wrong_shape_is_a_502(seen):
    async with proxied(lambda req: reply(200, {"unexpected": True}), upstream_api="chat") as (client, sink):
        r = await client.post("/v1/messages/count_tokens", json={"model": "m", "messages": MSG["messages"]})
    assert r.status_code == 502
    assert r.json()["type"] == "error"
    assert sink.calls[0].outcome == "upstream_error"


async def test_a_stream_that_goes_quiet_is_recorded_as_a_timeout():
    class Quiet(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield CHUNK
            raise httpx.ReadTimeout("no byte for 600 s")

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Quiet(), headers={"content-type": "text/event-stream"})

    async with proxied(handler) as (client, sink):
        r = await client.post("/v1/chat/completions", json={"model": "m", "messages": [], "stream": True})
    assert b'"error"' in r.content.strip().split(b"\n\n")[-1]
    assert sink.calls[0].outcome == "timeout"


async def test_nothing_is_added_to_what_the_client_sent_upstream(seen):
    async with proxied(lambda req: seen.append(req) or reply(200, OK)) as (client, _):
        client.headers.pop("user-agent", None)
        await client.post("/v1/messages", json=MSG)
    assert "user-agent" not in seen[0].headers
    assert "python-httpx" not in json.dumps(dict(seen[0].headers))


async def test_a_streamed_reply_is_relayed_chunk_by_chunk(seen):
    async with proxied(
        lambda req: httpx.Response(
            200, stream=Chunks(CHUNK, CHUNK), headers={"content-type": "text/event-stream"}
        )
    ) as (client, sink):
        r = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [], "stream": True, "return_token_ids": True},
        )
    assert r.content == CHUNK * 2
    assert sink.calls[0].outcome == "ok"
