"""The proxy as a real process in front of the scripted upstream (a real server on loopback)."""

from __future__ import annotations

import json
import time

import httpx
import pytest
import zstandard

from proxy.parquet import to_row
from proxy.record import Call
from tests.fakes.shell_tools import BASH_ANTHROPIC, BASH_CHAT, COMMAND_SCHEMA
from tests.proxy.conftest import anthropic_message
from tests.proxy.live import LiveProxy, kill_9_under_load, proxy_server, scripted_upstream

BASH = {**BASH_ANTHROPIC, "description": "run"}
REQUESTS = {
    "anthropic_messages": (
        "/v1/messages?beta=true",
        {"model": "m", "max_tokens": 64, "tools": [BASH], "messages": [{"role": "user", "content": "go"}]},
    ),
    "openai_responses": (
        "/v1/responses",
        {
            "model": "m",
            "input": "go",
            "tools": [{"type": "function", "name": "shell", "parameters": COMMAND_SCHEMA}],
        },
    ),
    "openai_chat": (
        "/v1/chat/completions",
        {"model": "m", "tools": [BASH_CHAT], "messages": [{"role": "user", "content": "go"}]},
    ),
}


@pytest.fixture(scope="module")
def upstream():
    with scripted_upstream() as url:
        yield url


@pytest.fixture
def proxy(upstream, tmp_path):
    with proxy_server(upstream, tmp_path / "data") as p:
        yield p


@pytest.mark.parametrize("stream", [False, True])
def test_every_api_is_relayed_and_recorded_with_tool_calls(proxy: LiveProxy, stream: bool):
    for api, (path, body) in REQUESTS.items():
        extra = {"stream_options": {"include_usage": True}} if stream and api == "openai_chat" else {}
        r = httpx.post(
            f"{proxy.url}/s/live-{api}{path}", json={**body, "stream": stream, **extra}, timeout=30
        )
        assert r.status_code == 200, r.text
    for api in REQUESTS:
        (row,) = proxy.rows(session_id=f"live-{api}")
        assert row["api"] == api
        assert row["outcome"] == "ok"
        assert row["stream"] is stream
        assert row["prompt_tokens"], row
        assert row["completion_tokens"], row
        response = json.loads(row["response_json"])
        text = json.dumps(response)
        assert "AGENT_PROOF.txt" in text  # the tool call's full arguments survived assembly
        assert (row["stream_raw_zstd"] is not None) is stream
    models = httpx.get(f"{proxy.url}/v1/models", timeout=10)
    assert models.status_code == 200
    assert models.json()["data"]


def test_upstream_token_ids_are_recorded_for_chat(proxy: LiveProxy):
    path, body = REQUESTS["openai_chat"]
    for stream in (False, True):
        req = {**body, "stream": stream, "return_token_ids": True, "stream_options": {"include_usage": True}}
        assert httpx.post(f"{proxy.url}/s/ids-{stream}{path}", json=req, timeout=30).status_code == 200
    for stream in (False, True):
        (row,) = proxy.rows(session_id=f"ids-{stream}")
        assert row["prompt_token_ids"]
        assert len(row["prompt_token_ids"]) == row["prompt_tokens"]
        assert row["completion_token_ids"]
        assert len(row["completion_token_ids"]) == row["completion_tokens"]
        assert row["token_ids_source"] == "upstream"


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_compressed_responses_relay_and_record_decoded(proxy: LiveProxy, encoding: str):
    path, body = REQUESTS["anthropic_messages"]  # passthrough: chat calls are rewritten (token ids)
    for stream in (False, True):
        req = {**body, "model": f"compress-{encoding}", "stream": stream}
        r = httpx.post(
            f"{proxy.url}/s/enc-{encoding}-{stream}{path}",
            json=req,
            headers={"accept-encoding": encoding},
            timeout=30,
        )
        assert r.status_code == 200
        assert r.headers.get("content-encoding") == encoding
        (row,) = proxy.rows(session_id=f"enc-{encoding}-{stream}")
        assert "AGENT_PROOF.txt" in row["response_json"]
        assert row["response_content_encoding"] == encoding


def test_client_disconnect_and_upstream_drop_are_recorded(proxy: LiveProxy):
    path, body = REQUESTS["anthropic_messages"]
    with httpx.stream(
        "POST",
        f"{proxy.url}/s/gone{path}",
        json={**body, "model": "bench-200000", "stream": True},
        timeout=30,
    ) as r:
        next(r.iter_bytes())  # read a little, then hang up
    dropped = httpx.post(
        f"{proxy.url}/s/drop{path}", json={**body, "model": "drop-after-3", "stream": True}, timeout=30
    )
    assert b"event: error" in dropped.content
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not proxy.rows(session_id="gone"):
        time.sleep(0.2)
    assert proxy.rows(session_id="gone")[0]["outcome"] == "client_disconnected"
    assert proxy.rows(session_id="drop")[0]["outcome"] == "upstream_error"
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200


def test_malformed_battery_leaves_the_proxy_serving(proxy: LiveProxy):
    bad = [
        b"",
        b"null",
        b"{",
        b'"str"',
        b"[]",
        b"{}",
        json.dumps({"model": 1, "messages": [], "max_tokens": 1}).encode(),
        b"\x00" * 100,
    ]
    for path in (
        "/v1/messages",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/completions",
        "/v1/messages/count_tokens",
    ):
        for body in bad:
            r = httpx.post(proxy.url + path, content=body, timeout=10)
            assert 400 <= r.status_code < 500, (path, body, r.status_code)
    big = httpx.post(proxy.url + "/v1/chat/completions", content=b"x" * (33 * 1024 * 1024), timeout=60)
    assert big.status_code == 413
    assert httpx.get(proxy.url + "/healthz").status_code == 200
    assert len(proxy.rows(outcome="rejected")) == 5 * len(bad) + 1


def test_kill_9_under_load_loses_no_completed_call(upstream, tmp_path):
    completed, ids = kill_9_under_load(upstream, tmp_path / "data", REQUESTS["openai_chat"], 8, until=150)
    missing = set(completed) - set(ids)
    assert len(completed) >= 150, f"{len(missing)} completed calls missing"
    assert not missing, f"{len(missing)} completed calls missing"


def test_tokenize_native_keeps_filled_ids_only_when_they_match_the_reported_count(upstream, tmp_path):
    """The scripted upstream reports Messages/Responses usage as a byte count of the body, not of the prompt
    its /tokenize renders: ids that are not what the upstream counted are not recorded (the counts are).
    Against real vLLM the Codex call's ids match and are kept (tests/serving/test_agents_vllm.py)."""
    with proxy_server(upstream, tmp_path / "data", "--tokenize-native") as proxy:
        for api in ("anthropic_messages", "openai_responses"):
            path, body = REQUESTS[api]
            assert httpx.post(f"{proxy.url}/s/tok-{api}{path}", json=body, timeout=30).status_code == 200
        rows = {r["api"]: r for r in proxy.rows()}
    for api in ("anthropic_messages", "openai_responses"):
        assert rows[api]["prompt_token_ids"] is None, api
        assert rows[api]["token_ids_source"] is None, api
        assert rows[api]["prompt_tokens"] > 0, api
        assert not rows[api]["translated"]


def test_tokenize_native_ids_are_kept_when_they_match():
    """The roll keeps /tokenize ids whose count is the prompt count the upstream reported."""
    reply = anthropic_message("ok", input_tokens=3)
    call = Call(
        "POST",
        "/v1/messages",
        "anthropic_messages",
        "http://up",
        "p",
        status_code=200,
        response_content_type="application/json",
        response_chunks=[json.dumps(reply).encode()],
        extra={"prompt_token_ids": [5, 6, 7], "token_ids_source": "tokenize"},
    )
    row = to_row(call, zstandard.ZstdCompressor())
    assert (row["prompt_token_ids"], row["token_ids_source"]) == ([5, 6, 7], "tokenize")
    call.extra["prompt_token_ids"] = [5, 6]
    assert to_row(call, zstandard.ZstdCompressor())["prompt_token_ids"] is None


def test_two_proxies_share_one_data_dir_and_metrics_count_them(upstream, tmp_path):
    path, body = REQUESTS["anthropic_messages"]
    data = tmp_path / "shared"
    with proxy_server(upstream, data) as a, proxy_server(upstream, data) as b:
        for i, p in enumerate([a, b, a, b]):
            assert httpx.post(f"{p.url}/s/shared-{i}{path}", json=body, timeout=30).status_code == 200
        metrics = httpx.get(f"{a.url}/metrics").text
        rows = a.rows()
    assert sorted(r["session_id"] for r in rows) == [f"shared-{i}" for i in range(4)]
    assert len({r["proxy_id"] for r in rows}) == 2
    for series in (
        'dflash_proxy_requests_total{route="anthropic_messages",status="200"} 2.0',
        "dflash_proxy_records_written 2.0",
        "dflash_proxy_in_flight 0.0",
        "dflash_proxy_time_to_first_byte_seconds_count 2.0",
        "dflash_proxy_spool_depth",
        "dflash_proxy_response_bytes_total",
    ):
        assert series in metrics, series
