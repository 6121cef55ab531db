"""The scripted upstream as a real process on loopback: the CLI entry, and faults only a socket shows."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.sse import parse_sse
from tests.proxy.live import scripted_upstream

CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with scripted_upstream() as u:
        yield u


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", CHAT),
        ("/v1/messages", {**CHAT, "max_tokens": 5}),
        ("/v1/responses", {"input": "hi", "stream": True}),
    ],
)
def test_drop_after_n_cuts_the_stream_mid_body(url, path, body):
    received = b""
    with (  # noqa: PT012 — the cut happens while the body is read
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", url + path, json={**body, "model": "drop-after-3"}, timeout=10) as r,
    ):
        assert r.status_code == 200
        for chunk in r.iter_raw():
            received += chunk
    events = parse_sse(received.decode())
    assert len(events) == 3
    assert "[DONE]" not in received.decode()


def test_drop_after_cuts_a_non_streamed_body(url):
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": False, "model": "drop-after-1"})


def test_slow_first_byte_over_a_socket(url):
    """`slow-N` holds the first byte N ms: by N, not by a fixed delay (two Ns, the difference between them)."""

    def first_byte(model: str) -> float:
        started = time.monotonic()
        with httpx.stream("POST", url + "/v1/chat/completions", json={**CHAT, "model": model}) as r:
            next(r.iter_raw())
            return time.monotonic() - started

    short, long = first_byte("slow-250"), first_byte("slow-750")
    assert short >= 0.25
    assert long - short >= 0.5 - 0.05  # the clocks' granularity, not a performance bound


def test_bench_stream_is_n_copies_of_one_pre_encoded_line(url):
    """`bench-N`, the fast upstream of benchmarks/proxy_overhead.py: exactly N content chunks, each the same
    pre-encoded line (nothing encoded per chunk), between the role chunk and the stop chunk. How fast it
    streams is measured by benchmarks/scripted_upstream_speed.py, not asserted here."""
    r = httpx.post(url + "/v1/chat/completions", json={**CHAT, "model": "bench-20000"}, timeout=60)
    assert r.status_code == 200
    lines = r.text.split("\n\n")
    content = [line for line in lines if '"content":"tok "' in line]
    assert len(content) == 20000
    assert len(set(content)) == 1  # one line, repeated
    events = parse_sse(r.text)
    assert events[0][1]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-2][1]["choices"][0]["finish_reason"] == "stop"
    assert events[-1][1] == "[DONE]"


def test_chat_only_process_serves_chat_and_refuses_the_rest():
    with scripted_upstream("chat") as u:
        assert httpx.post(u + "/v1/chat/completions", json={**CHAT, "model": "m"}).status_code == 200
        for path in ("/v1/messages", "/v1/responses", "/v1/completions"):
            assert httpx.post(u + path, json={"model": "m"}).status_code == 404
        assert httpx.get(u + "/v1/models").json()["data"][0]["id"] == "scripted"
