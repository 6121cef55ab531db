"""Chat Completions response (non-streaming) → OpenAI Responses object, and the item shapes both share."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from wire.common import (
    JSON,
    answer_text,
    chat_usage_numbers,
    id_base,
    parse_arguments,
    reasoning_of,
    responses_status,
    responses_usage,
)
from wire.responses_tools import ResponsesTools, responses_tool_map


def output_text_part(text: str) -> JSON:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str, status: str) -> JSON:
    content = [output_text_part(text)] if status != "in_progress" else []
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, text: str | None) -> JSON:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content}


def custom_input(arguments: str) -> str:
    """The raw input of a freeform tool call from the `{"input": ...}` arguments it was sent as."""
    value = parse_arguments(arguments).get("input")
    return value if isinstance(value, str) else arguments


def tool_call_item(
    item_id: str, call_id: str, chat_name: str, arguments: str, status: str, tools: ResponsesTools
) -> JSON:
    """A `function_call` item (with `namespace` for a flattened namespace function) or, for a freeform
    tool, a `custom_tool_call` item."""
    namespace, name = tools.namespaced.get(chat_name, (None, chat_name))
    if chat_name in tools.custom:
        item: JSON = {
            "id": item_id,
            "type": "custom_tool_call",
            "status": status,
            "call_id": call_id,
            "name": name,
            "input": custom_input(arguments) if status != "in_progress" else "",
        }
    else:
        item = {
            "id": item_id,
            "type": "function_call",
            "status": status,
            "arguments": arguments,
            "call_id": call_id,
            "name": name,
        }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def response_object(
    request: Mapping[str, Any] | None,
    *,
    response_id: str,
    created_at: int,
    model: str,
    status: str,
    output: list[JSON],
    usage: JSON | None,
    incomplete_details: JSON | None = None,
    error: JSON | None = None,
) -> JSON:
    """A Responses `response` object; request parameters are echoed as OpenAI does."""
    req = request or {}
    reasoning = req.get("reasoning")
    if not isinstance(reasoning, Mapping):
        reasoning = {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": req.get("instructions"),
        "max_output_tokens": req.get("max_output_tokens"),
        "metadata": req.get("metadata") or {},
        "model": model,
        "output": output,
        "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "previous_response_id": req.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": bool(req.get("store", False)),
        "temperature": req.get("temperature", 1.0),
        "text": req.get("text") or {"format": {"type": "text"}},
        "tool_choice": req.get("tool_choice", "auto"),
        "tools": req.get("tools") or [],
        "top_p": req.get("top_p", 1.0),
        "truncation": req.get("truncation") or "disabled",
        "usage": usage,
        "user": None,
    }


def chat_to_responses_response(
    chat: Mapping[str, Any], request: Mapping[str, Any] | None = None, *, response_id: str | None = None
) -> JSON:
    """Translate a Chat Completions response into a Responses object.

    `request` is the client's original Responses body: its model and parameters are echoed, and its tools
    say which function calls are freeform (`custom_tool_call`) or namespaced. Only choice 0 is translated.
    """
    tools = responses_tool_map((request or {}).get("tools"))
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    message = choice.get("message") or {}
    base = id_base(chat.get("id"))
    output: list[JSON] = []
    reasoning = reasoning_of(message)
    if reasoning:
        output.append(reasoning_item(f"rs_{base}", reasoning))
    text = answer_text(message)
    if text:
        output.append(message_item(f"msg_{base}", text, "completed"))
    for i, call in enumerate(c for c in message.get("tool_calls") or [] if isinstance(c, Mapping)):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        output.append(
            tool_call_item(
                f"fc_{base}_{i}",
                call.get("id") or f"call_{base}_{i}",
                function.get("name") or "",
                arguments if isinstance(arguments, str) else "",
                "completed",
                tools,
            )
        )
    status, incomplete = responses_status(choice.get("finish_reason"))
    if status == "incomplete":
        for item in output:
            if item["type"] == "message":
                item["status"] = "incomplete"
    created = chat.get("created")
    return response_object(
        request,
        response_id=response_id or f"resp_{base}",
        created_at=created if isinstance(created, int) else int(time.time()),
        model=(request or {}).get("model") or chat.get("model") or "",
        status=status,
        output=output,
        usage=responses_usage(*chat_usage_numbers(chat.get("usage"))),
        incomplete_details=incomplete,
    )
