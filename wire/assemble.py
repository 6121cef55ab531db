"""Turn a relayed response (stream or not) into the API's non-streaming shape plus usage and token ids."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wire import sse


@dataclass
class Assembled:
    body: dict[str, Any] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    errors: list[str] = field(default_factory=list)


def assemble(api: str, data: bytes, is_stream: bool) -> Assembled:
    if not is_stream:
        try:
            body = json.loads(data) if data else None
        except ValueError:
            return Assembled(errors=["response body is not JSON"])
        return summarize(api, body if isinstance(body, dict) else None)
    if api == "anthropic_messages":
        return summarize(api, _anthropic_stream(data))
    if api == "openai_responses":
        return summarize(api, _responses_stream(data))
    if api in ("openai_chat", "openai_completions"):
        return summarize(api, _chat_stream(data))
    return Assembled()


def summarize(api: str, body: dict[str, Any] | None) -> Assembled:
    """Pull usage, finish reason and token ids out of a non-streaming-shaped body."""
    out = Assembled(body=body)
    if not body:
        return out
    usage = body.get("usage") or {}
    if api == "anthropic_messages":
        out.prompt_tokens = _sum_ints(
            usage, "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"
        )
        out.completion_tokens = usage.get("output_tokens")
        out.finish_reason = body.get("stop_reason")
    elif api == "openai_responses":
        out.prompt_tokens, out.completion_tokens = usage.get("input_tokens"), usage.get("output_tokens")
        incomplete = body.get("incomplete_details") or {}
        out.finish_reason = incomplete.get("reason") or body.get("status")
    elif api in ("openai_chat", "openai_completions"):
        out.prompt_tokens, out.completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        choices = body.get("choices") or [{}]
        out.finish_reason = choices[0].get("finish_reason")
        out.prompt_token_ids = body.get("prompt_token_ids")
        out.completion_token_ids = choices[0].get("token_ids")
    elif api == "anthropic_count_tokens":
        out.prompt_tokens = body.get("input_tokens")
    return out


def _sum_ints(d: dict[str, Any], *keys: str) -> int | None:
    vals = [d[k] for k in keys if isinstance(d.get(k), int)]
    return sum(vals) if vals else None


def _anthropic_stream(data: bytes) -> dict[str, Any] | None:
    msg: dict[str, Any] | None = None
    partial: dict[int, str] = {}
    for ev in sse.json_events(data):
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
            msg["content"][idx] = block
        elif kind == "content_block_delta":
            _apply_anthropic_delta(msg["content"][ev.get("index", -1)], ev.get("delta") or {}, partial, ev)
        elif kind == "content_block_stop":
            idx = ev.get("index", -1)
            if idx in partial:
                try:
                    msg["content"][idx]["input"] = json.loads(partial.pop(idx) or "{}")
                except ValueError:
                    msg["content"][idx]["input_unparsed"] = partial.pop(idx, "")
        elif kind == "message_delta":
            msg.update({k: v for k, v in (ev.get("delta") or {}).items()})
            # Streamed usage is cumulative: later values replace earlier ones, never add.
            msg["usage"] = {**(msg.get("usage") or {}), **(ev.get("usage") or {})}
        elif kind == "error":
            msg["error"] = ev.get("error")
    return msg


def _apply_anthropic_delta(
    block: dict[str, Any], delta: dict[str, Any], partial: dict[int, str], ev: dict[str, Any]
) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
    elif kind == "input_json_delta":
        idx = ev.get("index", -1)
        partial[idx] = partial.get(idx, "") + delta.get("partial_json", "")
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + delta.get("signature", "")


def _responses_stream(data: bytes) -> dict[str, Any] | None:
    final: dict[str, Any] | None = None
    items: dict[int, dict[str, Any]] = {}
    for ev in sse.json_events(data):
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


def _chat_stream(data: bytes) -> dict[str, Any] | None:
    out: dict[str, Any] | None = None
    choices: dict[int, dict[str, Any]] = {}
    for chunk in sse.json_events(data):
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
            _merge_chat_choice(choices.setdefault(int(ch.get("index", 0)), {"index": ch.get("index", 0)}), ch)
    if out is not None:
        out["choices"] = [_finish_choice(choices[i]) for i in sorted(choices)]
    return out


def _merge_chat_choice(acc: dict[str, Any], ch: dict[str, Any]) -> None:
    if ch.get("finish_reason"):
        acc["finish_reason"] = ch["finish_reason"]
    if ch.get("token_ids"):
        acc.setdefault("token_ids", []).extend(ch["token_ids"])
    if "text" in ch:  # legacy completions
        acc["text"] = acc.get("text", "") + (ch.get("text") or "")
    delta = ch.get("delta") or {}
    msg = acc.setdefault("message", {"role": "assistant"})
    for key in ("content", "reasoning_content", "reasoning"):
        if delta.get(key):
            msg[key] = (msg.get(key) or "") + delta[key]
    for tc in delta.get("tool_calls") or []:
        calls = msg.setdefault("tool_calls", {})
        slot = calls.setdefault(int(tc.get("index", 0)), {"type": "function", "function": {"arguments": ""}})
        if tc.get("id"):
            slot["id"] = tc["id"]
        fn = tc.get("function") or {}
        if fn.get("name"):
            slot["function"]["name"] = fn["name"]
        slot["function"]["arguments"] += fn.get("arguments") or ""


def _finish_choice(acc: dict[str, Any]) -> dict[str, Any]:
    msg = acc.get("message")
    if msg is not None and isinstance(msg.get("tool_calls"), dict):
        msg["tool_calls"] = [msg["tool_calls"][i] for i in sorted(msg["tool_calls"])]
    if "text" in acc:
        acc.pop("message", None)
    acc.setdefault("finish_reason", None)
    return acc
