"""Anthropic Messages → Chat messages: the system text, user and assistant turns, tool results, images."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wire.common import (
    BILLING_HEADER_PREFIX,
    JSON,
    Notes,
    chat_text_content,
    image_url_part,
    set_reasoning,
)

_CACHE_NOTE = "prompt-caching hint; a Chat upstream caches prefixes by itself"


# --- system ------------------------------------------------------------------------------------------


def system_text(content: Any, path: str, notes: Notes, keep_billing_header: bool) -> str:
    """Text of a `system` field or a `role: system` message; blocks join with no separator."""
    if content is None:
        return ""
    if isinstance(content, str):
        if not keep_billing_header and content.startswith(BILLING_HEADER_PREFIX):
            notes.drop(f"{path}.content", "Claude Code billing header (a per-request hash) not sent upstream")
            return ""
        return content
    texts: list[str] = []
    block_path = f"{path}[*]" if path == "system" else f"{path}.content[*]"
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, Mapping):
            continue
        if "cache_control" in block:
            notes.drop(f"{block_path}.cache_control", _CACHE_NOTE)
        if block.get("type") != "text":
            notes.drop(f"{block_path}(type={block.get('type')})", "only text blocks can be system text")
            continue
        text = block.get("text")
        if not isinstance(text, str):
            continue
        if not keep_billing_header and text.startswith(BILLING_HEADER_PREFIX):
            notes.drop(
                f"{block_path}.text", "Claude Code billing header (a per-request hash) not sent upstream"
            )
            continue
        texts.append(text)
    return "".join(texts)


def _has_tool_use(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") == "tool_use" for b in content
    )


def move_out_of_tool_runs(messages: list[Any], notes: Notes) -> list[Any]:
    """A system message between an assistant's tool_use and the user's tool_result would split the chat
    tool-call turn; it moves to just after the results. Every other system message stays where it is."""
    out: list[Any] = []
    held: list[Any] = []
    awaiting_results = False
    for message in messages:
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "system":
            if awaiting_results:
                held.append(message)
                notes.map("messages[*](role=system)", "moved after the tool results it interrupted")
            else:
                out.append(message)
            continue
        if role == "assistant":
            out.extend(held)
            held.clear()
        out.append(message)
        if role == "user":
            out.extend(held)
            held.clear()
        awaiting_results = role == "assistant" and _has_tool_use(message)
    out.extend(held)
    return out


# --- messages ----------------------------------------------------------------------------------------


def convert_message(message: Any, out: list[JSON], notes: Notes, keep_billing_header: bool) -> None:
    if not isinstance(message, Mapping):
        notes.drop("messages[*]", "not an object")
        return
    role = message.get("role")
    content = message.get("content")
    if role == "system":
        text = system_text(content, "messages[*]", notes, keep_billing_header)
        if text:
            out.append({"role": "system", "content": text})
        return
    if role == "assistant":
        out.append(_assistant_message(content, notes))
        return
    if role != "user":
        notes.drop("messages[*].role", f"unknown role {role!r}; treated as user")
    _user_messages(content, out, notes)


def _user_messages(content: Any, out: list[JSON], notes: Notes) -> None:
    """A user message becomes, in block order: user parts, `role: tool` messages for a run of tool_result
    blocks, and a user message after the run with the blocks that follow (plus any tool_result images)."""
    if isinstance(content, str):
        out.append({"role": "user", "content": content})
        return
    parts: list[JSON] = []
    moved_images: list[JSON] = []
    in_tool_run = False
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, Mapping):
            continue
        path = f"messages[*].content[*](type={block.get('type')})"
        if "cache_control" in block:
            notes.drop("messages[*].content[*].cache_control", _CACHE_NOTE)
        if block.get("type") == "tool_result":
            if parts and not in_tool_run:
                out.append({"role": "user", "content": chat_text_content(parts)})
                parts = []
            in_tool_run = True
            out.append(_tool_message(block, moved_images, notes))
            continue
        if in_tool_run:
            parts = [*moved_images, *parts]
            moved_images = []
            in_tool_run = False
        part = _user_part(block, path, notes)
        if part is not None:
            parts.append(part)
    parts = [*parts, *moved_images]
    if parts:
        out.append({"role": "user", "content": chat_text_content(parts)})


def _image_url(source: Any) -> str | None:
    if not isinstance(source, Mapping):
        return None
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    return None


def _user_part(block: Mapping[str, Any], path: str, notes: Notes) -> JSON | None:
    kind = block.get("type")
    if "citations" in block:
        notes.drop(f"{path}.citations", "citations have no Chat equivalent")
    if kind == "text":
        return {"type": "text", "text": block.get("text") or ""}
    if kind == "image":
        url = _image_url(block.get("source"))
        if url is None:
            notes.drop(
                f"{path}.source", "image source other than base64 or url (a Files API id) cannot be sent"
            )
            return None
        return image_url_part(url)
    if kind == "document":
        source = block.get("source")
        if (
            isinstance(source, Mapping)
            and source.get("type") == "text"
            and isinstance(source.get("data"), str)
        ):
            notes.map(path, "plain-text document sent as a text part")
            return {"type": "text", "text": source["data"]}
        notes.drop(path, "PDF / file documents cannot be sent to a Chat upstream")
        return None
    if kind in ("tool_use", "thinking", "redacted_thinking"):
        notes.drop(path, "not valid in a user message")
        return None
    notes.drop(path, "content block type without a Chat equivalent")
    return None


def _tool_message(block: Mapping[str, Any], moved_images: list[JSON], notes: Notes) -> JSON:
    """A tool_result block → a `role: tool` message; its text blocks join with newlines (as vLLM does)."""
    path = "messages[*].content[*](type=tool_result)"
    if block.get("is_error"):
        notes.drop(f"{path}.is_error", "Chat tool messages have no error flag; the result text is kept")
    content = block.get("content")
    text = ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        for item in content:
            if not isinstance(item, Mapping):
                continue
            if "cache_control" in item:
                notes.drop(f"{path}.content[*].cache_control", _CACHE_NOTE)
            kind = item.get("type")
            if kind == "text":
                texts.append(str(item.get("text") or ""))
            elif kind == "image" and (url := _image_url(item.get("source"))) is not None:
                moved_images.append(image_url_part(url))
                notes.map(
                    f"{path}.content[*](type=image)",
                    "Chat tool messages carry text only; the image goes in a user message after the tool results",
                )
            elif kind == "tool_reference":
                notes.drop(
                    f"{path}.content[*](type=tool_reference)",
                    "the referenced deferred tool is sent in `tools` instead",
                )
            else:
                notes.drop(f"{path}.content[*](type={kind})", "tool-result content without a Chat equivalent")
        text = "\n".join(texts)
    return {"role": "tool", "tool_call_id": block.get("tool_use_id") or "", "content": text}


def _assistant_message(content: Any, notes: Notes) -> JSON:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    parts: list[JSON] = []
    reasoning: list[str] = []
    tool_calls: list[JSON] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        path = f"messages[*].content[*](type={kind})"
        if "cache_control" in block:
            notes.drop("messages[*].content[*].cache_control", _CACHE_NOTE)
        if kind == "text":
            if "citations" in block:
                notes.drop(f"{path}.citations", "citations have no Chat equivalent")
            parts.append({"type": "text", "text": block.get("text") or ""})
        elif kind == "thinking":
            reasoning.append(str(block.get("thinking") or ""))
            if block.get("signature"):
                notes.drop(
                    f"{path}.signature", "thinking signatures are Anthropic's; the reasoning text is kept"
                )
        elif kind == "redacted_thinking":
            notes.drop(path, "encrypted reasoning cannot be shown to another model")
        elif kind == "tool_use":
            arguments = block.get("input")
            tool_calls.append(
                {
                    "id": block.get("id") or "",
                    "type": "function",
                    "function": {
                        "name": block.get("name") or "",
                        "arguments": json.dumps(
                            arguments if arguments is not None else {}, ensure_ascii=False
                        ),
                    },
                }
            )
        else:
            notes.drop(path, "assistant content block without a Chat equivalent")
    message: JSON = {"role": "assistant", "content": chat_text_content(parts) if parts else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    elif message["content"] is None:
        message["content"] = ""
    if reasoning:
        set_reasoning(message, "".join(reasoning))
    return message
