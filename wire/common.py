"""Shared types and helpers of the translation layer: the result type, the field report, ids, usage, SSE."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

# Where a reasoning text goes on a chat assistant message. vLLM ≥ 0.11 reads `reasoning`, older vLLM,
# SGLang and llama.cpp read `reasoning_content`; each ignores the other, so both are sent.
REASONING_KEYS: tuple[str, ...] = ("reasoning", "reasoning_content")

# Claude Code's first system block carries a per-request hash; vLLM's own /v1/messages strips it too, so
# the prompt prefix stays cacheable and translated and native calls render the same tokens.
BILLING_HEADER_PREFIX = "x-anthropic-billing-header"

# `reasoning_effort` values every vLLM with the field accepts; others are dropped rather than risk a 400.
REASONING_EFFORTS = frozenset({"low", "medium", "high"})


@dataclass(frozen=True, slots=True)
class FieldNote:
    """One field of the client's request that a Chat upstream cannot take as it is.

    `path` names the field with `[*]` for list positions (e.g. `messages[*].content[*].cache_control`),
    `action` is `dropped` or `mapped`, `detail` says what happened, `count` how many times it occurred.
    """

    path: str
    action: str
    detail: str
    count: int = 1

    def as_dict(self) -> JSON:
        return {"path": self.path, "action": self.action, "detail": self.detail, "count": self.count}


@dataclass(slots=True)
class Translated:
    """A translated request: the Chat Completions body to send, and what was dropped or mapped on the way."""

    request: JSON
    dropped: list[FieldNote] = field(default_factory=list)

    @property
    def stream(self) -> bool:
        return bool(self.request.get("stream"))

    def dropped_json(self) -> list[JSON]:
        """The field report as plain dicts (for storing next to the call record)."""
        return [n.as_dict() for n in self.dropped]


class Notes:
    """Collects field notes, merging repeats of the same (path, action, detail) into one counted note."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str], int] = {}

    def drop(self, path: str, detail: str) -> None:
        self._add(path, "dropped", detail)

    def map(self, path: str, detail: str) -> None:
        self._add(path, "mapped", detail)

    def _add(self, path: str, action: str, detail: str) -> None:
        key = (path, action, detail)
        self._counts[key] = self._counts.get(key, 0) + 1

    def result(self) -> list[FieldNote]:
        return [FieldNote(p, a, d, c) for (p, a, d), c in self._counts.items()]


def id_base(chat_id: Any) -> str:
    """The distinctive part of a chat completion id (`chatcmpl-abc` → `abc`), or a fresh one."""
    if isinstance(chat_id, str) and chat_id:
        for prefix in ("chatcmpl-", "chatcmpl_", "cmpl-"):
            if chat_id.startswith(prefix):
                return chat_id[len(prefix) :] or uuid.uuid4().hex[:24]
        return chat_id
    return uuid.uuid4().hex[:24]


def dumps(obj: Any) -> str:
    """Compact JSON, UTF-8 kept as is (what the real APIs send)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def sse_event(name: str, data: Mapping[str, Any]) -> bytes:
    """One server-sent event, ready to write: `event: NAME\\ndata: {...}\\n\\n`."""
    return f"event: {name}\ndata: {dumps(data)}\n\n".encode()


def text_of_parts(parts: Iterable[Any], types: Iterable[str] = ("text",), sep: str = "") -> str:
    wanted = set(types)
    out = [
        p.get("text", "")
        for p in parts
        if isinstance(p, Mapping) and p.get("type") in wanted and isinstance(p.get("text"), str)
    ]
    return sep.join(out)


def reasoning_of(message: Mapping[str, Any]) -> str | None:
    """The reasoning text of a chat message or delta: `reasoning_content`, else `reasoning` (never both:
    servers that send both send the same text twice)."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str):
            return value
    return None


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments (a JSON string) as an object; anything unparseable or not an object gives {}."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def chat_usage_numbers(usage: Mapping[str, Any] | None) -> tuple[int, int, int, int]:
    """(prompt, completion, cached prompt, reasoning) token counts of a chat `usage` object."""
    if not isinstance(usage, Mapping):
        return 0, 0, 0, 0
    prompt = int_or_zero(usage.get("prompt_tokens"))
    completion = int_or_zero(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = int_or_zero(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    out_details = usage.get("completion_tokens_details")
    reasoning = int_or_zero(out_details.get("reasoning_tokens")) if isinstance(out_details, Mapping) else 0
    return prompt, completion, cached, reasoning


def anthropic_usage(prompt: int, completion: int, cached: int = 0) -> JSON:
    """Anthropic usage: `input_tokens` excludes cache reads, which are reported on their own."""
    cached = min(cached, prompt)
    return {
        "input_tokens": prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": completion,
    }


def responses_usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> JSON:
    """Responses usage: `input_tokens` includes cached tokens, which are detailed."""
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": min(cached, prompt), "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


# Chat finish reasons ⇄ Anthropic stop reasons.
CHAT_TO_ANTHROPIC_STOP: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
ANTHROPIC_TO_CHAT_FINISH: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def anthropic_stop_reason(
    finish_reason: Any, stop_reason: Any, has_tool_calls: bool
) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for a chat choice's `finish_reason` and vLLM's `stop_reason` (the matched
    stop string, a stop token id, or null for end of sequence)."""
    if finish_reason == "stop":
        if has_tool_calls:
            return "tool_use", None
        if isinstance(stop_reason, str) and stop_reason:
            return "stop_sequence", stop_reason
        return "end_turn", None
    if finish_reason in CHAT_TO_ANTHROPIC_STOP:
        return CHAT_TO_ANTHROPIC_STOP[finish_reason], None
    if has_tool_calls:
        return "tool_use", None
    return "end_turn", None


def responses_status(finish_reason: Any) -> tuple[str, JSON | None]:
    """(status, incomplete_details) of a Responses object for a chat finish reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def image_url_part(url: str) -> JSON:
    return {"type": "image_url", "image_url": {"url": url}}


def chat_text_content(parts: list[JSON]) -> str | list[JSON]:
    """Chat message content from parts: a single text part collapses to a plain string."""
    if len(parts) == 1 and parts[0].get("type") == "text":
        return str(parts[0]["text"])
    return parts


def set_reasoning(message: JSON, text: str) -> None:
    for key in REASONING_KEYS:
        message[key] = text


def merge_leading_system(messages: list[JSON], notes: Notes, path: str) -> list[JSON]:
    """Join the run of system messages that opens a conversation into one (many chat templates accept a
    single leading system message only); later system messages stay where they are."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    if n < 2:
        return messages
    texts = []
    for message in messages[:n]:
        content = message.get("content")
        texts.append(content if isinstance(content, str) else text_of_parts(content or [], sep="\n"))
    notes.map(path, "leading system messages joined into one chat system message")
    return [{"role": "system", "content": "\n\n".join(t for t in texts if t)}, *messages[n:]]


def stream_fields(chat: JSON, stream: bool, return_token_ids: bool) -> None:
    """Streaming flags every translated request carries."""
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    else:
        chat["stream"] = False
    if return_token_ids:
        chat["return_token_ids"] = True


def answer_text(message: Mapping[str, Any]) -> str:
    """A Chat message's answer as text: its content (string or parts), else its refusal, else ''."""
    text = message.get("content")
    if isinstance(text, list):
        text = text_of_parts(text)
    if not text and isinstance(message.get("refusal"), str):
        text = message["refusal"]
    return text if isinstance(text, str) else ""


def finish_request(
    chat: JSON,
    body: Mapping[str, Any],
    notes: Notes,
    handled: frozenset[str],
    dropped_top: Mapping[str, str],
    return_token_ids: bool,
) -> Translated:
    """Last step of a request translation: stream options, a note for every top-level field not read."""
    stream_fields(chat, bool(body.get("stream")), return_token_ids)
    for key in body:
        if key not in handled:
            notes.drop(key, dropped_top.get(key, "field unknown to the translation; not sent upstream"))
    return Translated(chat, notes.result())


def set_parameters(function: JSON, schema: Any, strict: Any) -> None:
    """A Chat function's `parameters` (an empty object schema when the tool has none) and `strict`."""
    function["parameters"] = schema or {"type": "object", "properties": {}}
    if strict is not None:
        function["strict"] = strict
