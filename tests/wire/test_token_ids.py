"""Token ids: taken out of chat responses and chunks for the record, kept from the client."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wire.vllm import PROMPT_IDS, Stream, chat_response
from wire import (
    SSETokenIdStripper,
    TokenIdCollector,
    ask_token_ids,
    pop_token_ids,
    read_token_ids,
    strip_token_ids_bytes,
)


def without_ids(obj: dict[str, Any]) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    obj.pop("prompt_token_ids", None)
    for choice in obj.get("choices") or []:
        choice.pop("token_ids", None)
    return obj


def test_pop_token_ids_from_a_response() -> None:
    body = chat_response({"content": "hi"}, prompt_token_ids=[1, 2, 3], choice={"token_ids": [7, 8]})
    found = pop_token_ids(body)
    assert found.prompt_token_ids == [1, 2, 3]
    assert found.completion_token_ids == [7, 8]
    assert "prompt_token_ids" not in body
    assert "token_ids" not in body["choices"][0]
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}


def test_read_token_ids_leaves_the_body_alone() -> None:
    body = chat_response({"content": "hi"}, prompt_token_ids=[1], choice={"token_ids": [2]})
    before = json.dumps(body)
    assert read_token_ids(body).completion_token_ids == [2]
    assert json.dumps(body) == before


def test_absent_ids() -> None:
    found = pop_token_ids(chat_response({"content": "x"}))
    assert found.prompt_token_ids is None
    assert found.completion_token_ids is None


def test_collector_over_a_stream() -> None:
    s = Stream().role().reasoning("a").text("b", "c").tool(0, "t", "f", "{}").finish("tool_calls").usage()
    collector = TokenIdCollector()
    for chunk in s.chunks:
        collector.collect(chunk)
    assert collector.prompt_token_ids == PROMPT_IDS
    assert collector.completion_token_ids == s.completion_ids
    assert "token_ids" in json.dumps(s.chunks)  # read only


def test_collector_with_removal() -> None:
    s = Stream().role().text("b").finish("stop")
    collector = TokenIdCollector()
    for chunk in s.chunks:
        collector.add(pop_token_ids(chunk))
    assert collector.completion_token_ids == s.completion_ids
    assert "token_ids" not in json.dumps(s.chunks)


def test_strip_bytes_positions() -> None:
    cases = {
        b'{"prompt_token_ids":[1,2],"id":"x"}': b'{"id":"x"}',
        b'{"id":"x","prompt_token_ids":[1,2]}': b'{"id":"x"}',
        b'{"id":"x","prompt_token_ids":[1,2],"y":1}': b'{"id":"x","y":1}',
        b'{"token_ids":[]}': b"{}",
        b'{"a":1, "token_ids": [1, 2, 3], "b":2}': b'{"a":1, "b":2}',
        b'{"a":1,"token_ids":null}': b'{"a":1}',
        b'{"a":"no ids here"}': b'{"a":"no ids here"}',
    }
    for raw, want in cases.items():
        assert strip_token_ids_bytes(raw) == want, raw


def test_strip_bytes_never_touches_text_that_looks_like_the_field() -> None:
    tricky: dict[str, Any] = {
        "choices": [
            {
                "index": 0,
                "delta": {"content": 'say "token_ids":[1,2] and "prompt_token_ids": [3]'},
                "token_ids": [9],
            }
        ]
    }
    raw = json.dumps(tricky, separators=(",", ":")).encode()
    out = json.loads(strip_token_ids_bytes(raw))
    assert out["choices"][0]["delta"]["content"] == tricky["choices"][0]["delta"]["content"]
    assert "token_ids" not in out["choices"][0]


def sse_line(obj: dict[str, Any], compact: bool) -> bytes:
    text = json.dumps(obj, separators=(",", ":")) if compact else json.dumps(obj)
    return b"data: " + text.encode() + b"\n\n"


ids = st.lists(st.integers(0, 200_000), max_size=6)
chunk = st.fixed_dictionaries(
    {
        "id": st.just("chatcmpl-1"),
        "choices": st.lists(
            st.fixed_dictionaries(
                {
                    "index": st.integers(0, 2),
                    "delta": st.fixed_dictionaries({"content": st.text(max_size=20)}),
                },
                optional={"token_ids": ids, "finish_reason": st.sampled_from(["stop", "length"])},
            ),
            max_size=2,
        ),
    },
    optional={"prompt_token_ids": ids, "usage": st.just({"prompt_tokens": 1})},
)


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(chunk, max_size=5), compact=st.booleans(), cuts=st.lists(st.integers(1, 40), max_size=10)
)
def test_bytes_strip_equals_json_strip_for_any_stream_cut_anywhere(
    chunks: list[dict[str, Any]], compact: bool, cuts: list[int]
) -> None:
    raw = b"".join(sse_line(c, compact) for c in chunks) + b"data: [DONE]\n\n"
    stripper = SSETokenIdStripper()
    out, pos = b"", 0
    for cut in cuts:
        out += stripper.feed(raw[pos : pos + cut])
        pos += cut
    out += stripper.feed(raw[pos:]) + stripper.flush()
    lines = [line for line in out.split(b"\n\n") if line]
    assert lines[-1] == b"data: [DONE]"
    assert [json.loads(line[6:]) for line in lines[:-1]] == [without_ids(c) for c in chunks]


def test_stripper_holds_a_partial_line_until_its_end() -> None:
    stripper = SSETokenIdStripper()
    assert stripper.feed(b'data: {"a":1,"token_ids":[1,') == b""
    assert stripper.feed(b"2]}\n\n") == b'data: {"a":1}\n\n'
    assert stripper.flush() == b""


def test_ask_token_ids_for_native_chat() -> None:
    body = {"model": "m", "messages": []}
    sent, client_asked = ask_token_ids(body)
    assert sent == {"model": "m", "messages": [], "return_token_ids": True}
    assert not client_asked
    assert "return_token_ids" not in body
    assert ask_token_ids({**body, "return_token_ids": True})[1] is True
