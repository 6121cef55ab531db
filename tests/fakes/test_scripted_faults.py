"""Fault injection, compression, bad input, API selection and recording of the scripted upstream."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import brotli
import httpx
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.scripted_upstream import create_app

USER = [{"role": "user", "content": "hi"}]
BODIES = {
    "/v1/messages": {"model": "m", "max_tokens": 5, "messages": USER},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/v1/chat/completions": {"model": "m", "messages": USER},
    "/v1/completions": {"model": "m", "prompt": "hi"},
}


def client_for(**options) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(**options)), base_url="http://s")


def assert_error_shape(path: str, response: httpx.Response, status: int) -> None:
    assert response.status_code == status
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error"
        assert body["error"]["message"]
    else:
        assert body["error"]["message"]
        assert body["error"]["type"]


@pytest.mark.parametrize("path", sorted(BODIES))
@pytest.mark.parametrize("status", [400, 429, 500, 503])
async def test_status_fault_in_each_api_error_shape(path, status):
    async with client_for() as c:
        by_model = await c.post(path, json={**BODIES[path], "model": f"status-{status}"})
        by_header = await c.post(path, json=BODIES[path], headers={"x-scripted-fault": f"status-{status}"})
    assert_error_shape(path, by_model, status)
    assert_error_shape(path, by_header, status)


async def test_slow_delays_the_first_byte():
    async with client_for() as c:
        started = time.monotonic()
        r = await c.post("/v1/chat/completions", json={**BODIES["/v1/chat/completions"], "model": "slow-300"})
    assert r.status_code == 200
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize("path", sorted(BODIES))
@pytest.mark.parametrize(
    ("raw", "why"),
    [(b"{not json", "not valid JSON"), (b"[1, 2]", "JSON object"), (b"{}", "missing required")],
)
async def test_bad_input_is_a_4xx_in_the_api_shape(path, raw, why):
    async with client_for() as c:
        r = await c.post(path, content=raw, headers={"content-type": "application/json"})
    assert_error_shape(path, r, 400)
    assert why in json.dumps(r.json())


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [("gzip", gzip.compress), ("br", brotli.compress), ("zstd", zstandard.ZstdCompressor().compress)],
)
async def test_compressed_request_bodies_are_decoded(encoding, pack):
    body = json.dumps(BODIES["/v1/chat/completions"]).encode()
    async with client_for() as c:
        r = await c.post("/v1/chat/completions", content=pack(body), headers={"content-encoding": encoding})
        seen = (await c.get("/_scripted/requests")).json()[-1]
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"]
    assert seen["body_compressed"]
    assert seen["body"] == BODIES["/v1/chat/completions"]


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
@pytest.mark.parametrize("stream", [False, True])
async def test_compressed_responses_decode_to_the_plain_ones(encoding, stream):
    body = {**BODIES["/v1/chat/completions"], "stream": stream}
    async with client_for() as c:
        plain = await c.post("/v1/chat/completions", json=body)
        packed = await c.post(
            "/v1/chat/completions", json=body, headers={"x-scripted-fault": f"compress-{encoding}"}
        )
    assert packed.headers["content-encoding"] == encoding
    # ids and timestamps differ between calls; the shape and the text do not
    strip = lambda t: [line.split('"model"')[-1] for line in t.splitlines() if line]  # noqa: E731
    assert strip(packed.text) == strip(plain.text)


async def test_chat_only_serves_chat_models_tokenize_health():
    async with client_for(apis="chat") as c:
        for path in ("/v1/messages", "/v1/responses", "/v1/completions", "/v1/messages/count_tokens"):
            r = await c.post(path, json=BODIES.get(path, {}))
            assert r.status_code == 404
            assert "not served" in r.text
        assert (await c.post("/v1/chat/completions", json=BODIES["/v1/chat/completions"])).status_code == 200
        assert (await c.post("/tokenize", json={"prompt": "ab"})).json()["tokens"] == [97, 98]
        assert (await c.get("/v1/models")).status_code == 200
        assert (await c.get("/health")).status_code == 200
        assert (await c.get("/v1/other")).status_code == 404


def test_unknown_api_selection_is_refused():
    with pytest.raises(ValueError, match="unknown APIs"):
        create_app(apis="chat,grpc")


async def test_recording_redacts_secrets_and_can_be_cleared(tmp_path: Path):
    async with client_for(record_dir=tmp_path) as c:
        headers = {"authorization": "Bearer sk-secret", "x-api-key": "sk-other", "x-session-id": "ses_1"}
        await c.post("/v1/messages?beta=true", json=BODIES["/v1/messages"], headers=headers)
        listed = (await c.get("/_scripted/requests")).json()
        await c.delete("/_scripted/requests")
        assert (await c.get("/_scripted/requests")).json() == []
    written = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
    assert written == listed
    assert len(written) == 1
    record = written[0]
    assert record["path"] == "/v1/messages"
    assert record["query"] == "beta=true"
    assert ["authorization", "Bearer <redacted>"] in record["headers"]
    assert ["x-api-key", "<redacted>"] in record["headers"]
    assert ["x-session-id", "ses_1"] in record["headers"]
    assert "sk-secret" not in json.dumps(record)
    assert "sk-other" not in json.dumps(record)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(
    ["model", "messages", "tools", "input", "prompt", "max_tokens", "stream", "stream_options"]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(sorted(BODIES)), body=st.dictionaries(FIELDS, JSON, max_size=6))
async def test_arbitrary_json_bodies_get_200_or_400_never_500(path, body):
    async with client_for() as c:
        r = await c.post(path, json=body)
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert_error_shape(path, r, 400)


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd", "deflate", "snappy"])
async def test_undecodable_request_bodies_are_400(encoding):
    async with client_for() as c:
        r = await c.post("/v1/responses", content=b"\x00garbage", headers={"content-encoding": encoding})
        seen = (await c.get("/_scripted/requests")).json()[-1]
    assert_error_shape("/v1/responses", r, 400)
    assert seen["body"] is None
    assert seen["body_error"]
