"""The chat view's columns: each call's conversation as the target saw it (wire/chat_view.py), typed, stored
as a prefix of its trajectory's `chat_messages` plus a tail, as the JSON `messages` are (records/dataset.py).

A call's view is its prompt's messages; its reply is kept apart (`chat_reply`), and a trajectory's
`chat_messages` is its last call's view followed by that reply, the whole conversation for SFT. Tools are
stored on the trajectory and on a call only where they differ from it. Consecutive calls share their equal
leading message objects, so an open session holds what it adds, not turns² messages."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wire.chat_view import (
    ChatViewError,
    chat_body,
    reply_turn,
    template_kwargs,
    typed_messages,
    typed_tools,
)


@dataclass
class ChatView:
    messages: list[dict[str, Any]]  # the prompt, typed
    reply: dict[str, Any] | None
    tools: list[dict[str, Any]] | None
    kwargs: str | None  # chat_template_kwargs, JSON
    shared_next: int | None = None  # leading messages equal to the next call's view (same trajectory)


def chat_view(row: dict[str, Any], reply_json: str | None) -> ChatView | None:
    """`row`: api, request_json (scrubbed), translated, upstream_request_json (scrubbed). None: no view."""
    try:
        body = chat_body(row)
    except ChatViewError:
        return None
    if not isinstance(body.get("messages"), list):
        return None
    kwargs = template_kwargs(body)
    return ChatView(
        typed_messages(body["messages"]),
        _reply(row, reply_json),
        typed_tools(body.get("tools")),
        json.dumps(kwargs, ensure_ascii=False, sort_keys=True) if kwargs else None,
    )


def _reply(row: dict[str, Any], reply_json: str | None) -> dict[str, Any] | None:
    """The reply as one typed assistant message (None: the recorded reply cannot be made one)."""
    try:
        reply = json.loads(reply_json or "null")
        return typed_messages([reply_turn(row, reply)])[0] if isinstance(reply, dict) else None
    except (ChatViewError, ValueError, KeyError, TypeError, AttributeError):
        return None


def share(prev: ChatView | None, new: ChatView | None) -> int:
    """Leading messages `new` has in common with `prev` (the same objects from now on); tools likewise."""
    if prev is None or new is None:
        return 0
    n = 0
    for a, b in zip(prev.messages, new.messages, strict=False):
        if a != b:
            break
        n += 1
    new.messages[:n] = prev.messages[:n]
    if new.tools == prev.tools:
        new.tools = prev.tools
    return n


def chat_columns(views: Sequence[ChatView | None], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fill each call row's chat columns (views in trajectory order); the trajectory's two columns."""
    final = views[-1]
    whole = [*final.messages, *([final.reply] if final.reply else [])] if final else None
    tools = final.tools if final else None
    keep = len(final.messages) if final else 0
    for view, row in zip(reversed(views), reversed(rows), strict=True):
        if view is None:
            row.update(
                chat_prefix=None, chat_tail=None, chat_reply=None, tools=None, chat_template_kwargs=None
            )
            keep = 0
            continue
        if view.shared_next is not None:
            keep = min(keep, view.shared_next)
        prefix = min(keep, len(view.messages))
        row.update(
            chat_prefix=prefix,
            chat_tail=view.messages[prefix:],
            chat_reply=view.reply,
            tools=None if view.tools == tools else view.tools,
            chat_template_kwargs=view.kwargs,
        )
    return {"chat_messages": whole, "tools": tools}


def no_chat(row: dict[str, Any]) -> None:
    row.update(chat_prefix=None, chat_tail=None, chat_reply=None, tools=None, chat_template_kwargs=None)
