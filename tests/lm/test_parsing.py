"""Generated text → content, reasoning and tool calls, streamed and not (no model needed beyond a tokenizer)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lm import Target
from lm.standin.parsing import IncrementalDetokenizer, OutputStream, parse_output

CALL = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la", "note": "é"}}\n</tool_call>'


def test_plain_text() -> None:
    p = parse_output("hello", think=True, hermes=True, final=True)
    assert (p.reasoning, p.content, p.tool_calls) == ("", "hello", [])


def test_reasoning_then_content() -> None:
    p = parse_output("<think>\nplan\n</think>\n\nanswer", think=True, hermes=False, final=True)
    assert (p.reasoning, p.content) == ("\nplan\n", "\n\nanswer")
    cut = parse_output("<think>\nstill thinking", think=True, hermes=False, final=True)
    assert (cut.reasoning, cut.content) == ("\nstill thinking", "")
    off = parse_output("<think>x</think>y", think=False, hermes=False, final=True)
    assert off.content == "<think>x</think>y"


def test_tool_calls_parsed_and_content_before_them_kept() -> None:
    p = parse_output(f"Let me look.\n{CALL}\n{CALL}", think=True, hermes=True, final=True)
    assert p.content == "Let me look.\n"
    assert [c.name for c in p.tool_calls] == ["bash", "bash"]
    assert json.loads(p.tool_calls[0].arguments) == {"cmd": "ls -la", "note": "é"}
    assert "é" in p.tool_calls[0].arguments  # not \\u-escaped
    assert p.tool_calls[0].id != p.tool_calls[1].id


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n{not json}\n</tool_call>",
        '<tool_call>\n{"arguments": {}}\n</tool_call>',
        f"{CALL}<tool_call>\n{{",  # a second block that never closes
    ],
)
def test_unparseable_tool_calls_fall_back_to_content(text: str) -> None:
    p = parse_output(text, think=False, hermes=True, final=True)
    assert p.tool_calls == []
    assert p.content == text


def test_partial_tags_are_held_back_until_final() -> None:
    assert parse_output("Hi <tool", think=False, hermes=True, final=False).content == "Hi "
    assert parse_output("Hi <tool", think=False, hermes=True, final=True).content == "Hi <tool"
    assert parse_output("<thi", think=True, hermes=False, final=False).content == ""
    assert parse_output("<think>abc</thi", think=True, hermes=False, final=False).reasoning == "abc"
    unfinished = parse_output(f"ok {CALL[:30]}", think=False, hermes=True, final=False)
    assert (unfinished.content, unfinished.tool_calls) == ("ok ", [])


def _stream(tokenizer: Any, text: str, **kw: Any) -> tuple[list[dict[str, Any]], OutputStream]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    out = OutputStream(tokenizer, **kw)
    deltas = [out.push([i], final=n == len(ids) - 1) for n, i in enumerate(ids)]
    return deltas, out


def _joined(deltas: list[dict[str, Any]], key: str) -> str:
    return "".join(d.get(key, "") for d in deltas)


def test_stream_deltas_add_up_to_the_message(tiny: Target) -> None:
    text = f"<think>\nI need the listing — ünïcode 🙂.\n</think>\n\nSure.\n{CALL}"
    deltas, out = _stream(tiny.tokenizer, text, think=True, hermes=True)
    whole = parse_output(text, think=True, hermes=True, final=True)
    assert _joined(deltas, "reasoning_content") == whole.reasoning == out.message.reasoning
    assert _joined(deltas, "content") == whole.content == "\n\nSure.\n"
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert len(calls) == 1
    assert calls[0]["index"] == 0
    assert calls[0]["function"]["name"] == "bash"
    assert calls[0]["id"] == out.message.tool_calls[0].id  # stable across re-parses
    assert not any("<tool_call>" in d.get("content", "") for d in deltas)


def test_stop_strings_truncate_and_finish(tiny: Target) -> None:
    deltas, out = _stream(tiny.tokenizer, "alpha beta STOP gamma delta", stop=["STOP", "zzz"])
    assert out.stop_string == "STOP"
    assert out.finished
    assert _joined(deltas, "content") == out.message.content == "alpha beta "
    kept = _stream(tiny.tokenizer, "alpha beta STOP gamma", stop=["STOP"], include_stop_str_in_output=True)[1]
    assert kept.message.content == "alpha beta STOP"
    never = _stream(tiny.tokenizer, "alpha ST beta", stop=["STOP"])
    assert never[1].stop_string is None
    assert _joined(never[0], "content") == "alpha ST beta"


def test_detokenizer_holds_split_characters(tiny: Target) -> None:
    text = "日本語のテキスト 🙂 and ascii"
    ids = tiny.tokenizer(text, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(tiny.tokenizer)
    pieces = [detok.push([i]) for i in ids]
    assert "".join(pieces) + detok.flush() == text
    assert not any("\ufffd" in p for p in pieces)
    special = IncrementalDetokenizer(tiny.tokenizer)
    assert special.push([*ids[:3], 151645]) + special.flush() == tiny.decode(ids[:3])  # <|im_end|> is skipped
