"""Stream and response tests: vLLM chat chunks → OpenAI Responses events, checked against the OpenAI SDK types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.wire.vllm import CREATED, PROMPT_IDS, Stream, chat_response, parse_sse, run, tool_call
from wire import ResponsesStreamTranslator, chat_to_responses_response

EVENT = TypeAdapter(ResponseStreamEvent)
REQUEST = {
    "model": "gpt-5-codex",
    "instructions": None,
    "tools": [
        {
            "type": "function",
            "name": "exec_command",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        },
        {
            "type": "function",
            "name": "view_image",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        },
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "stream": True,
}


def events_of(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Parse and validate every event against the SDK's own models (what strict clients accept)."""
    events = parse_sse(data)
    for _, ev in events:
        EVENT.validate_python(ev)
    return events


def check_sequence(events: list[tuple[str, dict[str, Any]]]) -> None:
    """Sequence numbers, output indexes and item ids are consistent, the way Codex tracks them."""
    assert [ev["sequence_number"] for _, ev in events] == list(range(len(events)))
    assert [n for n, _ in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1][0] in ("response.completed", "response.incomplete")
    open_items: dict[int, str] = {}
    done: list[dict[str, Any]] = []
    for name, ev in events[2:-1]:
        if name == "response.output_item.added":
            assert ev["output_index"] == len(done) + len(open_items)
            assert not open_items
            open_items[ev["output_index"]] = ev["item"]["id"]
        elif name == "response.output_item.done":
            assert open_items.pop(ev["output_index"]) == ev["item"]["id"]
            done.append(ev["item"])
        else:
            assert open_items.get(ev["output_index"]) == ev["item_id"], name
    assert not open_items
    final = events[-1][1]["response"]
    assert final["output"] == done
    Response.model_validate(final)


def translated(
    stream: Stream, request: dict[str, Any] = REQUEST
) -> tuple[ResponsesStreamTranslator, list[tuple[str, dict[str, Any]]]]:
    """The translator after the whole stream, and its events: each one an SDK event, all in sequence."""
    tr = ResponsesStreamTranslator(request)
    events = events_of(run(tr, stream))
    check_sequence(events)
    return tr, events


def test_text_only() -> None:
    tr, events = translated(Stream().role().text("Hel", "lo").finish("stop").usage())
    assert [n for n, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = events[0][1]["response"]
    assert created["id"] == "resp_9f1c2e"
    assert created["status"] == "in_progress"
    assert created["output"] == []
    assert created["created_at"] == CREATED
    assert created["model"] == "gpt-5-codex"
    assert created["usage"] is None
    assert events[2][1] == {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {
            "id": "msg_9f1c2e",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        },
        "sequence_number": 2,
    }
    assert events[4][1] == {
        "type": "response.output_text.delta",
        "item_id": "msg_9f1c2e",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hel",
        "logprobs": [],
        "sequence_number": 4,
    }
    assert events[6][1]["text"] == "Hello"
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed"
    assert completed["output"][0]["content"][0]["text"] == "Hello"
    assert completed["usage"] == {
        "input_tokens": 6,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 9,
    }
    assert tr.response == completed


def test_reasoning_item() -> None:
    _, events = translated(Stream().role().reasoning("think ", "hard").text("ok").finish("stop").usage())
    names = [n for n, _ in events]
    assert names[2:9] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    reasoning = events[8][1]["item"]
    assert reasoning == {
        "id": "rs_9f1c2e",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "think hard"}],
    }


def test_two_parallel_function_calls_with_argument_fragments() -> None:
    s = (
        Stream()
        .role()
        .tool(0, "call_a", "exec_command", '{"cmd":', ' "ls"}')
        .tool(1, "call_b", "view_image", '{"path"', ': "x.png"}')
        .finish("tool_calls")
        .usage()
    )
    tr, events = translated(s)
    added = [ev["item"] for n, ev in events if n == "response.output_item.added"]
    assert added == [
        {
            "id": "fc_9f1c2e_0",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": "call_a",
            "name": "exec_command",
        },
        {
            "id": "fc_9f1c2e_1",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": "call_b",
            "name": "view_image",
        },
    ]
    deltas = [
        (ev["output_index"], ev["delta"]) for n, ev in events if n == "response.function_call_arguments.delta"
    ]
    assert deltas == [(0, '{"cmd":'), (0, ' "ls"}'), (1, '{"path"'), (1, ': "x.png"}')]
    done = [ev for n, ev in events if n == "response.function_call_arguments.done"]
    assert [d["arguments"] for d in done] == ['{"cmd": "ls"}', '{"path": "x.png"}']
    final = events[-1][1]["response"]["output"]
    assert [(i["call_id"], i["status"], json.loads(i["arguments"])) for i in final] == [
        ("call_a", "completed", {"cmd": "ls"}),
        ("call_b", "completed", {"path": "x.png"}),
    ]
    assert tr.prompt_token_ids == PROMPT_IDS
    assert tr.completion_token_ids == s.completion_ids


def test_namespace_and_custom_tool_calls_map_back() -> None:
    request = {
        **REQUEST,
        "tools": [
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "d",
                "tools": [{"type": "function", "name": "spawn_agent", "parameters": {}}],
            },
            {"type": "custom", "name": "apply_patch", "description": "patch"},
        ],
    }
    s = (
        Stream()
        .role()
        .tool(0, "c1", "multi_agent_v1__spawn_agent", '{"task": "x"}')
        .tool(1, "c2", "apply_patch", '{"input": "*** Begin', ' Patch"}')
        .finish("tool_calls")
        .usage()
    )
    _, events = translated(s, request)
    final = events[-1][1]["response"]["output"]
    assert final[0] == {
        "id": "fc_9f1c2e_0",
        "type": "function_call",
        "status": "completed",
        "arguments": '{"task": "x"}',
        "call_id": "c1",
        "name": "spawn_agent",
        "namespace": "multi_agent_v1",
    }
    assert final[1] == {
        "id": "ctc_9f1c2e_1",
        "type": "custom_tool_call",
        "status": "completed",
        "call_id": "c2",
        "name": "apply_patch",
        "input": "*** Begin Patch",
    }
    names = [n for n, ev in events if ev.get("output_index") == 1]
    assert names == [
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
    ]


def test_length_makes_an_incomplete_response() -> None:
    _, events = translated(Stream().role().text("cut").finish("length").usage())
    name, ev = events[-1]
    assert name == "response.incomplete"
    assert ev["response"]["status"] == "incomplete"
    assert ev["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert ev["response"]["output"][0]["status"] == "incomplete"


def test_usage_with_cached_tokens_and_without_usage_chunk() -> None:
    tr = ResponsesStreamTranslator(REQUEST)
    events = events_of(run(tr, Stream().role().text("a").finish("stop").usage(prompt=50, cached=40)))
    assert events[-1][1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] == 40
    tr = ResponsesStreamTranslator(REQUEST)
    s = Stream().role().text("a", "b").finish("stop")
    usage = events_of(run(tr, s))[-1][1]["response"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (len(PROMPT_IDS), len(s.completion_ids))


def test_feed_bytes_with_arbitrary_splits() -> None:
    s = (
        Stream()
        .role()
        .reasoning("r")
        .text("t")
        .tool(0, "c", "exec_command", '{"cmd":', '"x"}')
        .finish("tool_calls")
        .usage()
    )
    raw = s.sse()
    expected = ResponsesStreamTranslator(REQUEST)
    want = expected.feed_bytes(raw) + expected.end_bytes()
    for step in (1, 5, 100):
        tr = ResponsesStreamTranslator(REQUEST)
        got = b"".join(tr.feed_bytes(raw[i : i + step]) for i in range(0, len(raw), step)) + tr.end_bytes()
        assert got == want
    check_sequence(events_of(want))


def test_upstream_error_gives_response_failed() -> None:
    tr = ResponsesStreamTranslator(REQUEST)
    tr.feed(Stream().role().chunks[0])
    tr.feed({"id": "x", "choices": [{"index": 0, "delta": {"content": "part"}}]})
    events = events_of(tr.error("upstream dropped the stream"))
    assert [n for n, _ in events] == ["response.failed"]
    response = events[0][1]["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "upstream dropped the stream"}
    assert tr.finish() == b""
    tr = ResponsesStreamTranslator(REQUEST)
    names = [n for n, _ in events_of(tr.feed({"error": {"message": "boom"}}))]
    assert names == ["response.created", "response.in_progress", "response.failed"]


def test_sequence_continues_across_feeds() -> None:
    tr = ResponsesStreamTranslator(REQUEST)
    s = Stream().role().text("a").finish("stop").usage()
    numbers = [ev["sequence_number"] for chunk in s.chunks for _, ev in parse_sse(tr.feed(chunk))]
    numbers += [ev["sequence_number"] for _, ev in parse_sse(tr.finish())]
    assert numbers == list(range(len(numbers)))


# --- non-streaming -----------------------------------------------------------------------------------


def test_chat_response_to_responses_object() -> None:
    chat = chat_response(
        {
            "reasoning": "thought",
            "content": "Running.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'},
                }
            ],
        },
        "tool_calls",
    )
    response = chat_to_responses_response(chat, REQUEST)
    Response.model_validate(response)
    assert response["id"] == "resp_9f1c2e"
    assert response["status"] == "completed"
    assert response["model"] == "gpt-5-codex"
    assert response["output"] == [
        {
            "id": "rs_9f1c2e",
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "thought"}],
        },
        {
            "id": "msg_9f1c2e",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Running.", "annotations": [], "logprobs": []}],
        },
        {
            "id": "fc_9f1c2e_0",
            "type": "function_call",
            "status": "completed",
            "arguments": '{"cmd":"ls"}',
            "call_id": "call_1",
            "name": "exec_command",
        },
    ]
    assert response["usage"]["input_tokens"] == 120
    assert response["usage"]["total_tokens"] == 150
    assert response["tools"] == REQUEST["tools"]
    assert response["parallel_tool_calls"] is True


@pytest.mark.parametrize(
    ("finish", "status"), [("stop", "completed"), ("length", "incomplete"), ("content_filter", "incomplete")]
)
def test_chat_response_status(finish: str, status: str) -> None:
    response = chat_to_responses_response(chat_response({"content": "x"}, finish), REQUEST)
    assert response["status"] == status
    Response.model_validate(response)


@settings(max_examples=50, deadline=None)
@given(
    text=st.lists(st.text(min_size=1, max_size=6), max_size=4),
    calls=st.lists(st.dictionaries(st.text(max_size=3), st.integers(), max_size=3), max_size=3),
    split=st.integers(1, 4),
)
def test_stream_and_non_stream_agree(text: list[str], calls: list[dict[str, int]], split: int) -> None:
    s = Stream().role().text(*text)
    tool_calls = []
    for i, args in enumerate(calls):
        raw = json.dumps(args)
        size = max(1, len(raw) // split)
        s.tool(i, f"call_{i}", "exec_command", *[raw[j : j + size] for j in range(0, len(raw), size)])
        tool_calls.append(tool_call(f"call_{i}", "exec_command", raw))
    s.finish("tool_calls" if calls else "stop").usage()
    _, events = translated(s)
    message: dict[str, Any] = {"content": "".join(text) or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    chat = chat_response(message, "tool_calls" if calls else "stop")
    chat["usage"] = s.chunks[-1]["usage"]
    assert events[-1][1]["response"] == chat_to_responses_response(chat, REQUEST)
