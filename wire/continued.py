"""A request followed by its recorded reply, in the request's own API shape: the conversation the target
rendered, ending with the turn it generated (the trainer re-renders it to find the completion's tokens)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wire.common import JSON


def anthropic_with_reply(body: Mapping[str, Any], reply: Mapping[str, Any]) -> JSON:
    """A Messages body with the reply's content blocks as the last assistant turn."""
    turn = {"role": "assistant", "content": reply.get("content") or []}
    return {**body, "messages": [*body.get("messages", []), turn]}


def responses_with_reply(body: Mapping[str, Any], reply: Mapping[str, Any]) -> JSON:
    """A Responses body with the reply's output items after its input (a bare string input is a user turn)."""
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    return {**body, "input": [*items, *(reply.get("output") or [])]}
