"""Generated token ids → OpenAI message parts, incrementally: text, stop strings, reasoning, tool calls.

Modelled on vLLM's parsers: Qwen3 `<think>…</think>` becomes `reasoning_content`; Hermes-style
`<tool_call>{"name": …, "arguments": …}</tool_call>` blocks (Qwen3's format) become `tool_calls`, the text
before the first block stays `content`, and a final output whose blocks do not parse is returned as
plain content. Streaming and non-streaming share one parse of the full text, so a stream's deltas always
add up to the non-streamed message.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerBase

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
_TOOL_BLOCK = re.compile(re.escape(TOOL_OPEN) + r"(.*?)" + re.escape(TOOL_CLOSE), re.DOTALL)


class IncrementalDetokenizer:
    """Text of a growing id sequence, emitted only once complete characters are known (a multi-byte
    character split over tokens is held back), decoding a short window rather than everything."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # ids before this are already emitted

    def _decode(self, ids: list[int]) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)
        assert isinstance(text, str)
        return text

    def push(self, ids: Sequence[int]) -> str:
        self.ids.extend(ids)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character decodes as U+FFFD)."""
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return after[len(before) :]


def _held(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that could still grow into `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


@dataclass
class ToolCall:
    name: str
    arguments: str  # a JSON object, as OpenAI sends it
    id: str = field(default_factory=lambda: f"chatcmpl-tool-{uuid.uuid4().hex}")

    def to_openai(self, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return out if index is None else {"index": index, **out}


def _tool_call(block: str) -> ToolCall | None:
    try:
        obj = json.loads(block)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    return ToolCall(obj["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))


@dataclass
class Parsed:
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


def parse_output(text: str, *, think: bool, hermes: bool, final: bool) -> Parsed:
    """Split generated text into reasoning, content and tool calls. When not `final`, anything that could
    still turn into a tag, or an unfinished tool-call block, is left out (it is not safe to stream yet)."""
    out = Parsed()
    rest = text
    if think:
        stripped = text.lstrip()
        if stripped.startswith(THINK_OPEN):
            body = stripped[len(THINK_OPEN) :]
            end = body.find(THINK_CLOSE)
            if end < 0:  # still thinking (or cut off by max_tokens)
                out.reasoning = body if final else body[: len(body) - _held(body, THINK_CLOSE)]
                return out
            out.reasoning, rest = body[:end], body[end + len(THINK_CLOSE) :]
        elif not final and THINK_OPEN.startswith(stripped):
            return out
    if hermes and (start := rest.find(TOOL_OPEN)) >= 0:
        blocks = rest[start:]
        calls = [_tool_call(m) for m in _TOOL_BLOCK.findall(blocks)]
        if final:
            tail = blocks[blocks.rfind(TOOL_CLOSE) + len(TOOL_CLOSE) :] if calls else blocks
            if not calls or None in calls or TOOL_OPEN in tail:
                out.content = rest  # vLLM: an output whose tool calls do not parse is plain content
                return out
        out.content = rest[:start]
        out.tool_calls = [c for c in calls if c is not None]
        return out
    out.content = rest if final or not hermes else rest[: len(rest) - _held(rest, TOOL_OPEN)]
    return out


class OutputStream:
    """Generated ids → message deltas for one choice: detokenizes, applies `stop` strings, parses.

    `push(ids, final=...)` returns the delta to stream (keys among `reasoning_content`, `content`,
    `tool_calls`); after the last push, `message` is the whole parsed output. When a stop string appears,
    `stop_string` is set and the output is final: the caller stops generating."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
        think: bool = False,
        hermes: bool = False,
        skip_special_tokens: bool = True,
    ) -> None:
        self.detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip_special_tokens)
        self.stop = [s for s in stop if s]
        self.include_stop = include_stop_str_in_output
        self.think, self.hermes = think, hermes
        self.text = ""
        self.stop_string: str | None = None
        self.finished = False
        self.message = Parsed()
        self._sent_reasoning = self._sent_content = 0
        self._call_ids: list[str] = []  # ids of the tool calls already streamed, kept across re-parses

    @property
    def token_ids(self) -> list[int]:
        return self.detok.ids

    def push(self, ids: Sequence[int], *, final: bool = False) -> dict[str, Any]:
        if self.finished:
            return {}
        old_len = len(self.text)
        self.text += self.detok.push(ids)
        if final:
            self.text += self.detok.flush()
        visible = self.text
        if self.stop:
            longest = max(len(s) for s in self.stop)
            window = max(0, old_len - longest + 1)
            hits = [(i, s) for s in self.stop if (i := self.text.find(s, window)) >= 0]
            if hits:
                at, self.stop_string = min(hits)
                self.text = visible = self.text[: at + (len(self.stop_string) if self.include_stop else 0)]
                final = True
            elif not final:
                visible = self.text[: len(self.text) - max(_held(self.text, s) for s in self.stop)]
        self.finished = final
        self.message = parse_output(visible, think=self.think, hermes=self.hermes, final=final)
        return self._delta()

    def _delta(self) -> dict[str, Any]:
        m = self.message
        delta: dict[str, Any] = {}
        if len(m.reasoning) > self._sent_reasoning:
            delta["reasoning_content"] = m.reasoning[self._sent_reasoning :]
            self._sent_reasoning = len(m.reasoning)
        if len(m.content) > self._sent_content:
            delta["content"] = m.content[self._sent_content :]
            self._sent_content = len(m.content)
        sent_calls = len(self._call_ids)
        for call, call_id in zip(m.tool_calls, self._call_ids, strict=False):
            call.id = call_id
        if len(m.tool_calls) > sent_calls:
            delta["tool_calls"] = [c.to_openai(i) for i, c in enumerate(m.tool_calls) if i >= sent_calls]
            self._call_ids += [c.id for c in m.tool_calls[sent_calls:]]
        return delta
