"""A stream that ends with its API's error event assembles with the error said (`Assembled.errors`), not as a
whole reply: a client's SDK raises on that event whatever came before it, so a reader of the assembly (the
rehearsal agent, a recorder) must not take the partial body for an answer."""

from __future__ import annotations

import json

import pytest

from wire import API_SHAPES, Api
from wire.assemble import assemble_with

CHAT_CHUNK = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "model": "m",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial"}, "finish_reason": None}],
}
FIRST_EVENT = {
    Api.MESSAGES: {"type": "message_start", "message": {"id": "m1", "role": "assistant", "content": []}},
    Api.RESPONSES: {"type": "response.created", "response": {"id": "r1", "output": []}},
    Api.CHAT: CHAT_CHUNK,
}


def _sse(event: dict) -> bytes:  # type: ignore[type-arg]
    return b"data: " + json.dumps(event).encode() + b"\n\n"


@pytest.mark.parametrize("api", list(FIRST_EVENT))
def test_the_apis_own_error_event_is_said_after_a_partial_reply(api: Api) -> None:
    shape = API_SHAPES[api]
    failed = shape.assemble(_sse(FIRST_EVENT[api]) + shape.stream_error("could not record; retry"), True)
    assert failed.errors == ["stream error event: could not record; retry"]
    whole = shape.assemble(_sse(FIRST_EVENT[api]), True)
    assert whole.errors == []


def test_a_failed_response_and_an_unknown_apis_error_are_said_too() -> None:
    failed = {"type": "response.failed", "response": {"id": "r1", "error": {"message": "engine died"}}}
    assembled = API_SHAPES[Api.RESPONSES].assemble(_sse(failed), True)
    assert assembled.errors == ["stream error event: engine died"]
    unknown = assemble_with(None, None, _sse({"error": "overloaded"}), is_stream=True)
    assert unknown.errors == ["stream error event: overloaded"]


def test_a_chunk_with_choices_is_not_an_error_whatever_its_keys() -> None:
    chunk = {**CHAT_CHUNK, "error": None}
    assert API_SHAPES[Api.CHAT].assemble(_sse(chunk), True).errors == []
