"""Property tests: a request translated to Chat and back keeps every message, tool call and tool result, in order."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from wire import (
    anthropic_to_chat_request,
    chat_to_anthropic_request,
    chat_to_responses_request,
    responses_to_chat_request,
)

CHAT_MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
text = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=12)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(text, json_value, max_size=4)
tool_name = st.sampled_from(["Bash", "Read", "Edit", "exec_command", "mcp__srv__x"])


def merge_leading_system(top: str | None, elements: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The request's own system text (`top`) and the leading system messages as one, as Chat gets them."""
    elements = [("system", top), *elements] if top else elements
    n = 0
    while n < len(elements) and elements[n][0] == "system":
        n += 1
    if n == 0:
        return elements
    joined = "\n\n".join(e[1] for e in elements[:n] if e[1])
    return [("system", joined), *elements[n:]]


def round_trip(
    body: dict[str, Any],
    to_chat: Callable[[dict[str, Any]], Any],
    from_chat: Callable[[dict[str, Any]], dict[str, Any]],
    elements: Callable[[dict[str, Any]], list[tuple[Any, ...]]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`body` to valid Chat messages and back (through JSON), every element kept in order; the Chat request
    and the body rebuilt."""
    chat = to_chat(body).request
    CHAT_MESSAGES.validate_python(chat["messages"])
    back = from_chat(json.loads(json.dumps(chat)))
    assert elements(back) == elements(body)
    return chat, back


# --- Anthropic ---------------------------------------------------------------------------------------


@st.composite
def anthropic_bodies(draw: st.DrawFn) -> dict[str, Any]:
    counter = iter(range(10_000))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": draw(text)} for _ in range(draw(st.integers(0, 2)))
    ]
    pending_results: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        # user turn: tool results for the previous assistant's calls first, then text / images
        blocks: list[dict[str, Any]] = []
        for call_id in pending_results:
            if draw(st.booleans()):
                content: Any = draw(text)
            else:
                content = [{"type": "text", "text": t} for t in draw(st.lists(text, min_size=1, max_size=2))]
            blocks.append({"type": "tool_result", "tool_use_id": call_id, "content": content})
        pending_results = []
        for _ in range(draw(st.integers(0 if blocks else 1, 2))):
            if draw(st.integers(0, 4)) == 0:
                blocks.append(
                    {"type": "image", "source": {"type": "url", "url": f"https://img.test/{draw(text)}.png"}}
                )
            else:
                blocks.append({"type": "text", "text": draw(text)})
        if not blocks:
            blocks.append({"type": "text", "text": draw(text)})
        user: Any = (
            blocks[0]["text"]
            if len(blocks) == 1 and blocks[0]["type"] == "text" and draw(st.booleans())
            else blocks
        )
        messages.append({"role": "user", "content": user})
        if draw(st.booleans()):
            messages.append({"role": "system", "content": draw(text)})
        # assistant turn: optional thinking, texts, then tool calls
        content = []
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": draw(text), "signature": "sig"})
        content += [{"type": "text", "text": t} for t in draw(st.lists(text, max_size=2))]
        for _ in range(draw(st.integers(0, 3))):
            call_id = f"toolu_{next(counter)}"
            content.append(
                {"type": "tool_use", "id": call_id, "name": draw(tool_name), "input": draw(arguments)}
            )
            pending_results.append(call_id)
        if not content:
            content.append({"type": "text", "text": draw(text)})
        messages.append({"role": "assistant", "content": content})
    if pending_results:
        results = [{"type": "tool_result", "tool_use_id": c, "content": draw(text)} for c in pending_results]
        messages.append({"role": "user", "content": results})
    body: dict[str, Any] = {"model": "claude", "max_tokens": 100, "messages": messages}
    if draw(st.booleans()):
        body["system"] = draw(text)
    tools = draw(st.lists(tool_name, unique=True, max_size=3))
    if tools:
        body["tools"] = [
            {"name": n, "description": "d", "input_schema": {"type": "object", "properties": {}}}
            for n in tools
        ]
    return body


def anthropic_elements(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for message in body["messages"]:
        role, content = message["role"], message["content"]
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content
        )
        for block in blocks:
            kind = block["type"]
            if role == "system":
                out.append(("system", block["text"]))
            elif kind == "text":
                out.append((f"{role}_text", block["text"]))
            elif kind == "image":
                out.append(("image", block["source"]["url"]))
            elif kind == "thinking":
                out.append(("thinking", block["thinking"]))
            elif kind == "tool_use":
                out.append(("tool_call", block["id"], block["name"], block["input"]))
            elif kind == "tool_result":
                result = block["content"]
                result = result if isinstance(result, str) else "\n".join(b["text"] for b in result)
                out.append(("tool_result", block["tool_use_id"], result))
    return merge_leading_system(body.get("system"), out)


@settings(max_examples=120, deadline=None)
@given(body=anthropic_bodies())
def test_anthropic_to_chat_and_back_keeps_everything_in_order(body: dict[str, Any]) -> None:
    chat, back = round_trip(body, anthropic_to_chat_request, chat_to_anthropic_request, anthropic_elements)
    assert [t["name"] for t in back.get("tools", [])] == [t["name"] for t in body.get("tools", [])]
    # Every tool call is answered by the tool message right after its assistant message, in order.
    messages = chat["messages"]
    for i, message in enumerate(messages):
        calls = [c["id"] for c in message.get("tool_calls") or []]
        if calls and i + len(calls) < len(messages):
            answered = [m.get("tool_call_id") for m in messages[i + 1 : i + 1 + len(calls)]]
            assert answered == calls


# --- Responses ---------------------------------------------------------------------------------------


def message_item(role: str, kind: str, value: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": value}]}


@st.composite
def responses_bodies(draw: st.DrawFn) -> dict[str, Any]:
    counter = iter(range(10_000))
    items: list[dict[str, Any]] = [
        message_item(draw(st.sampled_from(["developer", "system"])), "input_text", draw(text))
        for _ in range(draw(st.integers(0, 2)))
    ]
    for _ in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(1, 2))):
            items.append(message_item("user", "input_text", draw(text)))
        if draw(st.booleans()):
            items.append(
                {
                    "type": "reasoning",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": draw(text)}],
                }
            )
        if draw(st.booleans()):
            items.append(message_item("assistant", "output_text", draw(text)))
        calls = [f"call_{next(counter)}" for _ in range(draw(st.integers(0, 3)))]
        for call_id in calls:
            items.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": draw(tool_name),
                    "arguments": json.dumps(draw(arguments)),
                }
            )
        for call_id in calls:
            items.append({"type": "function_call_output", "call_id": call_id, "output": draw(text)})
        if not calls and items[-1]["type"] == "message" and items[-1]["role"] == "user":
            items.append(message_item("assistant", "output_text", draw(text)))
    body: dict[str, Any] = {"model": "gpt", "input": items}
    if draw(st.booleans()):
        body["instructions"] = draw(text)
    return body


def responses_elements(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for item in body["input"]:
        kind = item["type"]
        if kind == "message":
            role = "system" if item["role"] in ("system", "developer") else item["role"]
            for part in item["content"]:
                out.append(("system", part["text"]) if role == "system" else (f"{role}_text", part["text"]))
        elif kind == "reasoning":
            out.append(("thinking", "".join(p["text"] for p in item["content"])))
        elif kind == "function_call":
            out.append(("tool_call", item["call_id"], item["name"], json.loads(item["arguments"])))
        elif kind == "function_call_output":
            out.append(("tool_result", item["call_id"], item["output"]))
    return merge_leading_system(body.get("instructions"), out)


@settings(max_examples=120, deadline=None)
@given(body=responses_bodies())
def test_responses_to_chat_and_back_keeps_everything_in_order(body: dict[str, Any]) -> None:
    round_trip(body, responses_to_chat_request, chat_to_responses_request, responses_elements)
