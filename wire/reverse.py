"""Chat Completions request → Anthropic Messages / OpenAI Responses request.

The inverse of the request translators, for auditing a translated record and for the round-trip property
tests: translating a request to Chat and back keeps every message, tool call and tool result, in order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from wire.common import JSON, parse_arguments, reasoning_of


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return ""


def _parts(content: Any) -> list[JSON]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict(p) for p in content if isinstance(p, Mapping)] if isinstance(content, list) else []


def _image_source(url: str) -> JSON:
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "url", "url": url}


def _image_url(part: Mapping[str, Any]) -> str:
    image = part.get("image_url")
    return str(image.get("url") if isinstance(image, Mapping) else image or "")


# --- Anthropic ---------------------------------------------------------------------------------------


def _tool_calls(message: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(id, name, arguments) of each tool call of a Chat assistant message; a missing id or name is ""."""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        yield call.get("id") or "", function.get("name") or "", function.get("arguments")


def chat_to_anthropic_request(chat: Mapping[str, Any]) -> JSON:
    messages = list(chat.get("messages") or [])
    body: JSON = {"model": chat.get("model")}
    system: list[str] = []
    while messages and messages[0].get("role") == "system":
        system.append(_text(messages.pop(0).get("content")))
    if system:
        body["system"] = "\n\n".join(system)
    out: list[JSON] = []
    results: list[JSON] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.get("tool_call_id") or "",
                    "content": _text(message.get("content")),
                }
            )
            continue
        if role == "user":
            blocks = [*results, *_anthropic_user_blocks(message.get("content"))]
            results = []
            out.append({"role": "user", "content": blocks})
            continue
        if results:
            out.append({"role": "user", "content": results})
            results = []
        if role == "system":
            out.append({"role": "system", "content": _text(message.get("content"))})
        else:
            out.append({"role": "assistant", "content": _anthropic_assistant_blocks(message)})
    if results:
        out.append({"role": "user", "content": results})
    body["messages"] = out
    tools = [t.get("function") for t in chat.get("tools") or [] if isinstance(t, Mapping)]
    if tools:
        body["tools"] = [
            {
                "name": f.get("name"),
                **({"description": f["description"]} if f.get("description") is not None else {}),
                "input_schema": f.get("parameters") or {"type": "object", "properties": {}},
            }
            for f in tools
            if isinstance(f, Mapping)
        ]
    choice = chat.get("tool_choice")
    anthropic_choice: JSON | None = None
    if choice in ("auto", "none"):
        anthropic_choice = {"type": choice}
    elif choice == "required":
        anthropic_choice = {"type": "any"}
    elif isinstance(choice, Mapping):
        anthropic_choice = {"type": "tool", "name": (choice.get("function") or {}).get("name")}
    if anthropic_choice is not None and tools:
        if chat.get("parallel_tool_calls") is False:
            anthropic_choice["disable_parallel_tool_use"] = True
        body["tool_choice"] = anthropic_choice
    for key in ("max_tokens", "temperature", "top_p", "top_k"):
        if chat.get(key) is not None:
            body[key] = chat[key]
    if chat.get("stop"):
        stop = chat["stop"]
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if chat.get("stream"):
        body["stream"] = True
    return body


def _anthropic_user_blocks(content: Any) -> list[JSON]:
    blocks: list[JSON] = []
    for part in _parts(content):
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": part.get("text") or ""})
        elif part.get("type") == "image_url":
            blocks.append({"type": "image", "source": _image_source(_image_url(part))})
    return blocks


def _anthropic_assistant_blocks(message: Mapping[str, Any]) -> list[JSON]:
    blocks: list[JSON] = []
    reasoning = reasoning_of(message)
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    for part in _parts(message.get("content")):
        if part.get("type") == "text" and part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
    blocks += [
        {"type": "tool_use", "id": call_id, "name": name, "input": parse_arguments(arguments)}
        for call_id, name, arguments in _tool_calls(message)
    ]
    return blocks


# --- Responses ---------------------------------------------------------------------------------------


def _responses_items(message: Mapping[str, Any]) -> list[JSON]:
    """One Chat message as Responses input items (a tool result, an assistant turn's items, or a message)."""
    role = message.get("role")
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id") or "",
                "output": _text(message.get("content")),
            }
        ]
    items: list[JSON] = []
    if role == "assistant":
        reasoning = reasoning_of(message)
        if reasoning:
            items.append(
                {
                    "type": "reasoning",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": reasoning}],
                }
            )
        parts: list[JSON] = [
            {"type": "output_text", "text": p.get("text") or "", "annotations": []}
            for p in _parts(message.get("content"))
            if p.get("type") == "text" and p.get("text")
        ]
        if parts:
            items.append({"type": "message", "role": "assistant", "content": parts})
        items += [
            {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments or ""}
            for call_id, name, arguments in _tool_calls(message)
        ]
        return items
    parts = []
    for part in _parts(message.get("content")):
        if part.get("type") == "text":
            parts.append({"type": "input_text", "text": part.get("text") or ""})
        elif part.get("type") == "image_url":
            parts.append({"type": "input_image", "image_url": _image_url(part), "detail": "auto"})
    return [{"type": "message", "role": "user" if role == "user" else "system", "content": parts}]


def chat_to_responses_request(chat: Mapping[str, Any]) -> JSON:
    messages = list(chat.get("messages") or [])
    body: JSON = {"model": chat.get("model")}
    if messages and messages[0].get("role") == "system":
        body["instructions"] = _text(messages.pop(0).get("content"))
    items: list[JSON] = []
    for message in messages:
        items.extend(_responses_items(message))
    body["input"] = items
    tools = [t.get("function") for t in chat.get("tools") or [] if isinstance(t, Mapping)]
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "name": f.get("name"),
                **({"description": f["description"]} if f.get("description") is not None else {}),
                "parameters": f.get("parameters") or {"type": "object", "properties": {}},
                **({"strict": f["strict"]} if f.get("strict") is not None else {}),
            }
            for f in tools
            if isinstance(f, Mapping)
        ]
    choice = chat.get("tool_choice")
    if isinstance(choice, Mapping):
        body["tool_choice"] = {"type": "function", "name": (choice.get("function") or {}).get("name")}
    elif choice is not None and tools:
        body["tool_choice"] = choice
    if chat.get("parallel_tool_calls") is not None:
        body["parallel_tool_calls"] = chat["parallel_tool_calls"]
    if chat.get("max_tokens") is not None:
        body["max_output_tokens"] = chat["max_tokens"]
    for key in ("temperature", "top_p"):
        if chat.get(key) is not None:
            body[key] = chat[key]
    if chat.get("stream"):
        body["stream"] = True
    return body
