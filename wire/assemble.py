"""Turn a relayed response (stream or not) into the API's non-streaming shape plus usage and token ids.

Each API's parts (its stream assembler, its summary) are listed by its shape in `wire.shapes`."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from wire import sse
from wire.errors import stream_error_message


@dataclass
class Assembled:
    body: dict[str, Any] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    errors: list[str] = field(default_factory=list)  # a body that is not JSON; a stream's error events


# How one API's non-streaming body reports usage, finish reason and token ids (filled into an Assembled).
Summary = Callable[[dict[str, Any], Assembled], None]
# How one API's stream events add up to its non-streaming body.
StreamBody = Callable[[Iterable[dict[str, Any]]], dict[str, Any] | None]


def assemble_with(
    stream_body: StreamBody | None, summary: Summary | None, data: bytes | Iterable[bytes], is_stream: bool
) -> Assembled:
    """`data` is the whole body, or (a stream) its pieces in order: assembly is linear in the events and never
    needs the stream in one piece. The API's own parts come from its shape (`wire.shapes`)."""
    if not is_stream:
        raw = data if isinstance(data, bytes) else b"".join(data)
        try:
            body = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            return Assembled(errors=["response body is not JSON"])
        return summarize_with(summary, body if isinstance(body, dict) else None)
    failures: list[str] = []
    events = _watched(sse.iter_json_events([data] if isinstance(data, bytes) else data), failures)
    if stream_body is not None:
        out = summarize_with(summary, stream_body(events))
    else:
        for _ in events:  # drain: an unknown API's stream is still read (and its errors counted) once
            pass
        out = Assembled()
    out.errors += failures
    return out


def _watched(events: Iterable[dict[str, Any]], failures: list[str]) -> Iterator[dict[str, Any]]:
    """The events unchanged; each one that says the stream failed (`wire.errors`) noted in `failures`: the
    body assembled from the events before it is partial, and its client raised instead of reading it."""
    for event in events:
        message = stream_error_message(event)
        if message is not None:
            failures.append(f"stream error event: {message}")
        yield event


def summarize_with(summary: Summary | None, body: dict[str, Any] | None) -> Assembled:
    """Pull usage, finish reason and token ids out of a non-streaming-shaped body."""
    out = Assembled(body=body)
    if body and summary is not None:
        summary(body, out)
    return out


def anthropic_summary(body: dict[str, Any], out: Assembled) -> None:
    usage = body.get("usage") or {}
    out.prompt_tokens = _sum_ints(
        usage, "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"
    )
    out.completion_tokens = usage.get("output_tokens")
    out.finish_reason = body.get("stop_reason")


def responses_summary(body: dict[str, Any], out: Assembled) -> None:
    usage = body.get("usage") or {}
    out.prompt_tokens, out.completion_tokens = usage.get("input_tokens"), usage.get("output_tokens")
    incomplete = body.get("incomplete_details") or {}
    out.finish_reason = incomplete.get("reason") or body.get("status")


def chat_summary(body: dict[str, Any], out: Assembled) -> None:
    """Chat Completions and legacy Completions: the ids are vLLM's (`return_token_ids`)."""
    usage = body.get("usage") or {}
    out.prompt_tokens, out.completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
    choices = body.get("choices") or [{}]
    out.finish_reason = choices[0].get("finish_reason")
    out.prompt_token_ids = body.get("prompt_token_ids")
    out.completion_token_ids = choices[0].get("token_ids")


def count_tokens_summary(body: dict[str, Any], out: Assembled) -> None:
    out.prompt_tokens = body.get("input_tokens")


def _sum_ints(d: dict[str, Any], *keys: str) -> int | None:
    vals = [d[k] for k in keys if isinstance(d.get(k), int)]
    return sum(vals) if vals else None


class _Parts:
    """Text that arrives in deltas, kept as lists and joined once at the end (a `+=` per delta on a dict
    value copies the whole text each time: quadratic in the deltas)."""

    def __init__(self) -> None:
        self._parts: dict[tuple[Hashable, str], tuple[dict[str, Any], list[str]]] = {}

    def add(self, idx: Hashable, target: dict[str, Any], key: str, text: Any) -> None:
        if isinstance(text, str):
            self._parts.setdefault((idx, key), (target, []))[1].append(text)

    def take(self, idx: Hashable, key: str) -> str | None:
        entry = self._parts.pop((idx, key), None)
        return "".join(entry[1]) if entry else None

    def drop(self, idx: Hashable) -> None:
        for k in [k for k in self._parts if k[0] == idx]:
            del self._parts[k]

    def join_into_targets(self) -> None:
        for (_, key), (target, parts) in self._parts.items():
            target[key] = (target.get(key) or "") + "".join(parts)
        self._parts.clear()


def anthropic_stream_body(events: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    msg: dict[str, Any] | None = None
    parts = _Parts()
    for ev in events:
        kind = ev.get("type")
        if kind == "message_start":
            msg = dict(ev.get("message") or {})
            msg["content"] = list(msg.get("content") or [])
        elif msg is None:
            continue
        elif kind == "content_block_start":
            block = dict(ev.get("content_block") or {})
            idx = ev.get("index", len(msg["content"]))
            while len(msg["content"]) <= idx:
                msg["content"].append({})
            parts.drop(idx)
            msg["content"][idx] = block
        elif kind == "content_block_delta":
            idx = ev.get("index", -1)
            _apply_anthropic_delta(msg["content"][idx], ev.get("delta") or {}, parts, idx)
        elif kind == "content_block_stop":
            idx = ev.get("index", -1)
            partial = parts.take(idx, "partial_json")
            if partial is not None:
                try:
                    msg["content"][idx]["input"] = json.loads(partial or "{}")
                except (ValueError, RecursionError):
                    msg["content"][idx]["input_unparsed"] = partial
        elif kind == "message_delta":
            msg.update({k: v for k, v in (ev.get("delta") or {}).items()})
            # Streamed usage is cumulative: later values replace earlier ones, never add.
            msg["usage"] = {**(msg.get("usage") or {}), **(ev.get("usage") or {})}
        elif kind == "error":
            msg["error"] = ev.get("error")
    parts.join_into_targets()
    return msg


def _apply_anthropic_delta(block: dict[str, Any], delta: dict[str, Any], parts: _Parts, idx: int) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        parts.add(idx, block, "text", delta.get("text", ""))
    elif kind == "input_json_delta":
        parts.add(idx, {}, "partial_json", delta.get("partial_json", ""))
    elif kind == "thinking_delta":
        parts.add(idx, block, "thinking", delta.get("thinking", ""))
    elif kind == "signature_delta":
        parts.add(idx, block, "signature", delta.get("signature", ""))


def responses_stream_body(events: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    final: dict[str, Any] | None = None
    items: dict[int, dict[str, Any]] = {}
    for ev in events:
        kind = ev.get("type")
        starting = kind in ("response.created", "response.in_progress") and final is None
        if starting or kind in ("response.completed", "response.incomplete", "response.failed"):
            final = dict(ev.get("response") or {})
        elif kind == "response.output_item.done":
            items[int(ev.get("output_index", len(items)))] = ev.get("item") or {}
        elif kind == "error" and final is not None:
            final["error"] = {k: v for k, v in ev.items() if k != "type"}
    if final is not None and not final.get("output") and items:
        final["output"] = [items[i] for i in sorted(items)]
    return final


def chat_stream_body(events: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    out: dict[str, Any] | None = None
    choices: dict[int, tuple[dict[str, Any], _Parts]] = {}
    for chunk in events:
        if out is None:
            out = {k: chunk.get(k) for k in ("id", "created", "model") if k in chunk}
            out["object"] = (
                "chat.completion" if chunk.get("object") != "text_completion" else "text_completion"
            )
        if "prompt_token_ids" in chunk and chunk["prompt_token_ids"] is not None:
            out["prompt_token_ids"] = chunk["prompt_token_ids"]
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        if chunk.get("error"):
            out["error"] = chunk["error"]
        for ch in chunk.get("choices") or []:
            index = int(ch.get("index", 0))
            acc, parts = choices.setdefault(index, ({"index": ch.get("index", 0)}, _Parts()))
            _merge_chat_choice(acc, ch, parts)
    if out is not None:
        out["choices"] = [_finish_choice(*choices[i]) for i in sorted(choices)]
    return out


def _merge_chat_choice(acc: dict[str, Any], ch: dict[str, Any], parts: _Parts) -> None:
    if ch.get("finish_reason"):
        acc["finish_reason"] = ch["finish_reason"]
    if ch.get("token_ids"):
        acc.setdefault("token_ids", []).extend(ch["token_ids"])
    if "text" in ch:  # legacy completions
        parts.add("choice", acc, "text", ch.get("text") or "")
    delta = ch.get("delta") or {}
    msg = acc.setdefault("message", {"role": "assistant"})
    for key in ("content", "reasoning_content", "reasoning"):
        if delta.get(key):
            parts.add("message", msg, key, delta[key])
    for tc in delta.get("tool_calls") or []:
        calls = msg.setdefault("tool_calls", {})
        n = int(tc.get("index", 0))
        slot = calls.setdefault(n, {"type": "function", "function": {"arguments": ""}})
        if tc.get("id"):
            slot["id"] = tc["id"]
        fn = tc.get("function") or {}
        if fn.get("name"):
            slot["function"]["name"] = fn["name"]
        parts.add(("tool", n), slot["function"], "arguments", fn.get("arguments") or "")


def _finish_choice(acc: dict[str, Any], parts: _Parts) -> dict[str, Any]:
    parts.join_into_targets()
    msg = acc.get("message")
    if msg is not None and isinstance(msg.get("tool_calls"), dict):
        msg["tool_calls"] = [msg["tool_calls"][i] for i in sorted(msg["tool_calls"])]
    if "text" in acc:
        acc.pop("message", None)
    acc.setdefault("finish_reason", None)
    return acc
