"""Stream tests: realistic vLLM chunk sequences → Anthropic Messages events."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wire.vllm import PROMPT_IDS, Stream, parse_sse, run
from wire import AnthropicStreamTranslator

DELTA_FOR_BLOCK = {
    "text": {"text_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "tool_use": {"input_json_delta"},
}


def check_grammar(events: list[tuple[str, dict[str, Any]]]) -> None:
    """The order Anthropic (and Claude Code's parser) expects."""
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    open_block: dict[str, Any] | None = None
    next_index = 0
    for name, ev in events[2:-2]:
        if name == "content_block_start":
            assert open_block is None
            assert ev["index"] == next_index
            open_block = ev
            next_index += 1
        elif name == "content_block_delta":
            assert open_block is not None
            assert ev["index"] == open_block["index"]
            assert ev["delta"]["type"] in DELTA_FOR_BLOCK[open_block["content_block"]["type"]]
        elif name == "content_block_stop":
            assert open_block is not None
            assert ev["index"] == open_block["index"]
            open_block = None
        else:
            assert name == "ping", name
    assert open_block is None


def assemble(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Accumulate the events the way the Anthropic SDK does."""
    msg: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for name, ev in events:
        if name == "message_start":
            msg = json.loads(json.dumps(ev["message"]))
        elif name == "content_block_start":
            msg["content"].append(dict(ev["content_block"]))
        elif name == "content_block_delta":
            block, delta = msg["content"][ev["index"]], ev["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                partial[ev["index"]] = partial.get(ev["index"], "") + delta["partial_json"]
        elif name == "content_block_stop" and ev["index"] in partial:
            msg["content"][ev["index"]]["input"] = json.loads(partial[ev["index"]])
        elif name == "message_delta":
            msg.update(ev["delta"])
            msg["usage"].update(ev["usage"])
    return msg


def test_text_only() -> None:
    s = Stream().role().text("Hel", "lo", " world").finish("stop").usage()
    tr = AnthropicStreamTranslator({"model": "claude-sonnet-4-5"})
    events = parse_sse(run(tr, s))
    check_grammar(events)
    assert [n for n, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["id"] == "msg_9f1c2e"
    assert start["model"] == "claude-sonnet-4-5"
    assert start["content"] == []
    assert start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == len(PROMPT_IDS)  # from prompt_token_ids, before any usage
    assert events[2][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert events[3][1] == {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hel"},
    }
    assert events[7][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {
            "input_tokens": 6,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 4,
        },
    }
    assert assemble(events) == tr.message
    assert tr.message["content"] == [{"type": "text", "text": "Hello world"}]


def test_reasoning_then_text() -> None:
    s = Stream().role().reasoning("Let me ", "think.").text("Answer.").finish("stop").usage()
    tr = AnthropicStreamTranslator()
    events = parse_sse(run(tr, s))
    check_grammar(events)
    blocks = [ev["content_block"] for n, ev in events if n == "content_block_start"]
    assert blocks == [{"type": "thinking", "thinking": "", "signature": ""}, {"type": "text", "text": ""}]
    deltas = [ev["delta"]["type"] for n, ev in events if n == "content_block_delta"]
    assert deltas == ["thinking_delta", "thinking_delta", "signature_delta", "text_delta"]
    message = assemble(events)
    assert message == tr.message
    assert message["content"][0]["thinking"] == "Let me think."
    assert message["content"][0]["signature"]


def test_reasoning_content_key_of_older_vllm() -> None:
    tr = AnthropicStreamTranslator()
    run(tr, Stream(reasoning_key="reasoning_content").role().reasoning("r").text("t").finish("stop"))
    assert [b["type"] for b in tr.message["content"]] == ["thinking", "text"]


def test_two_parallel_tool_calls_with_argument_fragments() -> None:
    s = (
        Stream()
        .role()
        .text("I'll run both.")
        .tool(0, "chatcmpl-tool-aa", "Bash", '{"command"', ': "ls -la"', "}")
        .tool(1, "chatcmpl-tool-bb", "Read", '{"file_path": ', '"/tmp/ü.txt"}')
        .finish("tool_calls")
        .usage()
    )
    tr = AnthropicStreamTranslator({"model": "claude-x"})
    events = parse_sse(run(tr, s))
    check_grammar(events)
    starts = [ev["content_block"] for n, ev in events if n == "content_block_start"]
    assert starts == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "chatcmpl-tool-aa", "name": "Bash", "input": {}},
        {"type": "tool_use", "id": "chatcmpl-tool-bb", "name": "Read", "input": {}},
    ]
    fragments = [
        ev["delta"]["partial_json"] for n, ev in events if n == "content_block_delta" and ev["index"] == 1
    ]
    assert fragments == ['{"command"', ': "ls -la"', "}"]
    message = assemble(events)
    assert message == tr.message
    assert message["content"][1]["input"] == {"command": "ls -la"}
    assert message["content"][2]["input"] == {"file_path": "/tmp/ü.txt"}
    assert message["stop_reason"] == "tool_use"
    assert tr.prompt_token_ids == PROMPT_IDS
    assert tr.completion_token_ids == s.completion_ids


def test_tool_call_arguments_in_the_first_delta_and_late_name() -> None:
    tr = AnthropicStreamTranslator()
    tr.feed({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    # Some servers send the id first and the name in a later chunk; the block waits for the name.
    tr.feed(
        {
            "id": "chatcmpl-1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": '{"a"'}}]},
                }
            ],
        }
    )
    out = tr.feed(
        {
            "id": "chatcmpl-1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ": 1}"}}]},
                }
            ],
        }
    )
    events = parse_sse(out)
    assert events[0][1]["content_block"] == {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    assert [ev["delta"]["partial_json"] for _, ev in events[1:]] == [
        '{"a": 1}'
    ]  # the buffered fragment + this one
    tr.feed({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    tr.finish()
    assert tr.message["content"][0]["input"] == {"a": 1}


def test_stop_sequence_and_max_tokens() -> None:
    tr = AnthropicStreamTranslator()
    run(tr, Stream().role().text("a").finish("stop", stop_reason="</done>").usage())
    assert (tr.message["stop_reason"], tr.message["stop_sequence"]) == ("stop_sequence", "</done>")
    tr = AnthropicStreamTranslator()
    events = parse_sse(run(tr, Stream().role().text("a").finish("length").usage()))
    assert events[-2][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}


def test_usage_is_cumulative_and_reports_cache_reads() -> None:
    tr = AnthropicStreamTranslator()
    events = parse_sse(run(tr, Stream().role().text("a", "b").finish("stop").usage(prompt=500, cached=400)))
    deltas = [ev for n, ev in events if n == "message_delta"]
    assert len(deltas) == 1
    assert deltas[0]["usage"] == {
        "input_tokens": 100,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 400,
        "output_tokens": 3,
    }


def test_without_usage_chunk_counts_come_from_token_ids() -> None:
    tr = AnthropicStreamTranslator()
    s = Stream().role().text("a", "b").finish("stop")
    events = parse_sse(run(tr, s))
    assert events[-2][1]["usage"]["output_tokens"] == len(s.completion_ids)
    assert events[-2][1]["usage"]["input_tokens"] == len(PROMPT_IDS)


def test_without_token_ids_message_start_has_zero_input() -> None:
    tr = AnthropicStreamTranslator()
    events = parse_sse(run(tr, Stream(token_ids=False).role().text("a").finish("stop").usage()))
    assert events[0][1]["message"]["usage"]["input_tokens"] == 0
    assert events[-2][1]["usage"]["input_tokens"] == 6
    assert tr.prompt_token_ids is None
    assert tr.completion_token_ids is None


def test_feed_bytes_with_arbitrary_splits_and_done() -> None:
    s = (
        Stream()
        .role()
        .reasoning("r")
        .text("t")
        .tool(0, "c", "f", '{"x":', " 1}")
        .finish("tool_calls")
        .usage()
    )
    whole = AnthropicStreamTranslator(message_id="msg_fixed")
    expected = whole.feed_bytes(s.sse()) + whole.end_bytes()
    raw = s.sse()
    for step in (1, 7, 64):
        tr = AnthropicStreamTranslator(message_id="msg_fixed")
        out = b"".join(tr.feed_bytes(raw[i : i + step]) for i in range(0, len(raw), step)) + tr.end_bytes()
        assert strip_signatures(out) == strip_signatures(expected)
        assert tr.finished
    assert parse_sse(expected)[-1][0] == "message_stop"


def strip_signatures(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = parse_sse(data)
    for _, ev in events:
        if ev.get("delta", {}).get("type") == "signature_delta":
            ev["delta"]["signature"] = "*"
    return events


def test_finish_is_idempotent_and_feed_after_finish_is_ignored() -> None:
    tr = AnthropicStreamTranslator()
    run(tr, Stream().role().text("a").finish("stop"))
    assert tr.finish() == b""
    assert tr.feed({"choices": [{"index": 0, "delta": {"content": "late"}}]}) == b""


def test_empty_stream_still_makes_a_valid_message() -> None:
    tr = AnthropicStreamTranslator({"model": "m"})
    events = parse_sse(tr.finish())
    check_grammar(events)
    assert tr.message["content"] == []


def test_upstream_error_mid_stream() -> None:
    tr = AnthropicStreamTranslator()
    tr.feed(Stream().role().chunks[0])
    out = tr.feed({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}})
    assert parse_sse(out) == [
        ("error", {"type": "error", "error": {"type": "api_error", "message": "engine died"}})
    ]
    assert tr.failed
    assert tr.finish() == b""
    tr = AnthropicStreamTranslator()
    assert (
        parse_sse(tr.error("upstream timed out", "timeout_error"))[0][1]["error"]["type"] == "timeout_error"
    )


def test_ping_event() -> None:
    assert AnthropicStreamTranslator.ping() == b'event: ping\ndata: {"type":"ping"}\n\n'


def test_other_choices_are_ignored() -> None:
    tr = AnthropicStreamTranslator()
    tr.feed(
        {
            "id": "x",
            "choices": [
                {"index": 1, "delta": {"content": "other"}},
                {"index": 0, "delta": {"content": "mine"}},
            ],
        }
    )
    tr.finish()
    assert tr.message["content"] == [{"type": "text", "text": "mine"}]
    assert tr.anomalies == ["choice other than 0 ignored"]


@settings(max_examples=60, deadline=None)
@given(
    reasoning=st.lists(st.text(min_size=1, max_size=5), max_size=4),
    text=st.lists(st.text(min_size=1, max_size=5), max_size=4),
    calls=st.lists(
        st.tuples(
            st.sampled_from(["Bash", "Read", "Edit"]),
            st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
            st.integers(1, 5),
        ),
        max_size=3,
    ),
)
def test_any_sequence_assembles_to_what_was_streamed(
    reasoning: list[str], text: list[str], calls: list[tuple[str, dict[str, int], int]]
) -> None:
    s = Stream().role().reasoning(*reasoning).text(*text)
    for i, (name, args, n_pieces) in enumerate(calls):
        raw = json.dumps(args)
        size = max(1, len(raw) // n_pieces)
        s.tool(i, f"call_{i}", name, *[raw[j : j + size] for j in range(0, len(raw), size)])
    s.finish("tool_calls" if calls else "stop").usage()
    tr = AnthropicStreamTranslator()
    events = parse_sse(run(tr, s))
    check_grammar(events)
    message = assemble(events)
    assert message == tr.message
    expected: list[dict[str, Any]] = []
    if reasoning:
        expected.append({"type": "thinking", "thinking": "".join(reasoning)})
    if text:
        expected.append({"type": "text", "text": "".join(text)})
    for i, (name, args, _) in enumerate(calls):
        expected.append({"type": "tool_use", "id": f"call_{i}", "name": name, "input": args})
    got = [{k: v for k, v in b.items() if k != "signature"} for b in message["content"]]
    assert got == expected
    assert message["stop_reason"] == ("tool_use" if calls else "end_turn")
