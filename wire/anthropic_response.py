"""Chat Completions response (non-streaming) → Anthropic Messages response."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from wire.common import (
    JSON,
    answer_text,
    anthropic_stop_reason,
    anthropic_usage,
    chat_usage_numbers,
    id_base,
    parse_arguments,
    reasoning_of,
)


def thinking_signature() -> str:
    """Placeholder signature for a thinking block (Chat upstreams have none; clients expect the field).
    The proxy drops signatures on the way back, so its value never matters."""
    return uuid.uuid4().hex


def chat_to_anthropic_message(
    chat: Mapping[str, Any], request: Mapping[str, Any] | None = None, *, message_id: str | None = None
) -> JSON:
    """Translate a Chat Completions response into an Anthropic `message` object.

    `request` is the client's original Messages body: its `model` is echoed, as Anthropic does. A stop on
    a stop string (vLLM reports it in `choices[0].stop_reason`) becomes `stop_sequence`. Only choice 0 is
    translated (Anthropic has no `n`).
    """
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    message = choice.get("message") or {}
    content: list[JSON] = []
    reasoning = reasoning_of(message)
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": thinking_signature()})
    text = answer_text(message)
    if text:
        content.append({"type": "text", "text": text})
    tool_calls = [c for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    base = id_base(chat.get("id"))
    for i, call in enumerate(tool_calls):
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_{base}_{i}",
                "name": function.get("name") or "",
                "input": parse_arguments(function.get("arguments")),
            }
        )
    stop_reason, stop_sequence = anthropic_stop_reason(
        choice.get("finish_reason"), choice.get("stop_reason"), bool(tool_calls)
    )
    prompt, completion, cached, _ = chat_usage_numbers(chat.get("usage"))
    return {
        "id": message_id or f"msg_{base}",
        "type": "message",
        "role": "assistant",
        "model": (request or {}).get("model") or chat.get("model") or "",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": anthropic_usage(prompt, completion, cached),
    }
