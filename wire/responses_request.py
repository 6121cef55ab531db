"""OpenAI Responses request → Chat Completions request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wire.common import (
    JSON,
    REASONING_EFFORTS,
    Notes,
    Translated,
    finish_request,
    merge_leading_system,
    set_parameters,
)
from wire.responses_items import ItemBuilder
from wire.responses_tools import (
    CUSTOM_TOOL_PARAMETERS,
    ResponsesTools,
    flat_tool_name,
    responses_tool_map,
)

_DROPPED_TOP: dict[str, str] = {
    "store": "the proxy is stateless; nothing is stored upstream",
    "include": "extra output (e.g. reasoning.encrypted_content) has no Chat equivalent",
    "metadata": "request metadata is not sent upstream",
    "prompt_cache_key": "the upstream caches prefixes by itself",
    "service_tier": "no service tiers upstream",
    "truncation": "the upstream does not truncate; an over-long prompt fails there",
    "user": "end-user id is not sent upstream",
    "safety_identifier": "end-user id is not sent upstream",
    "previous_response_id": "the proxy is stateless: earlier turns are not restored, only `input` is sent",
    "conversation": "the proxy is stateless: stored conversations are not restored",
    "background": "background mode has no Chat equivalent; the call runs in the foreground",
    "max_tool_calls": "no Chat equivalent",
    "top_logprobs": "logprobs are not translated back",
    "prompt": "stored prompt templates cannot be resolved upstream",
    "stream_options": "Responses stream options (obfuscation) have no Chat equivalent",
    "client_metadata": "client metadata is not sent upstream",
}
_HOSTED_TOOL = "hosted OpenAI tool; a Chat upstream cannot run it"


# Top-level fields this translation reads; every other field is dropped with a note.
_HANDLED = frozenset(
    {
        "model",
        "instructions",
        "input",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "stream",
    }
)


def responses_to_chat_request(
    body: Mapping[str, Any], *, model: str | None = None, return_token_ids: bool = False
) -> Translated:
    """Translate a Responses body into one Chat Completions body.

    `model` replaces the client's model name; `return_token_ids` asks vLLM for prompt and completion ids.
    """
    notes = Notes()
    chat: JSON = {"model": model if model is not None else body.get("model")}
    if model is not None and model != body.get("model"):
        notes.map("model", f"replaced by the upstream model {model!r}")
    tool_map = responses_tool_map(body.get("tools"))

    builder = ItemBuilder(notes, tool_map)
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        if instructions:
            builder.out.append({"role": "system", "content": instructions})
    elif isinstance(instructions, list):
        notes.map("instructions", "instruction items sent as messages before the input")
        for item in instructions:
            builder.item(item, "instructions[*]")
    elif instructions is not None:
        notes.drop("instructions", "neither text nor items")
    items = body.get("input")
    if isinstance(items, str):
        builder.out_message("user", items)
    elif isinstance(items, list):
        for item in items:
            builder.item(item, "input[*]")
    builder.close()
    chat["messages"] = merge_leading_system(builder.out, notes, "input[*](role=system|developer)")

    _convert_tools(body, chat, notes, tool_map)
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if isinstance(body.get("parallel_tool_calls"), bool) and chat.get("tools"):
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
        notes.map("parallel_tool_calls", "sent as Chat parallel_tool_calls")
    elif "parallel_tool_calls" in body:
        notes.drop("parallel_tool_calls", "no tools to call")
    _convert_text(body, chat, notes)
    _convert_reasoning(body, chat, notes)
    return finish_request(chat, body, notes, _HANDLED, _DROPPED_TOP, return_token_ids)


def _convert_tools(body: Mapping[str, Any], chat: JSON, notes: Notes, tool_map: ResponsesTools) -> None:
    tools: list[JSON] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        kind = tool.get("type")
        if kind in ("function", "custom"):
            tools.append(_function_tool(tool, tool.get("name") or "", "tools[*]", notes))
        elif kind == "namespace":
            namespace = str(tool.get("name") or "")
            notes.map(
                "tools[*](type=namespace)",
                "each function flattened into a Chat function named namespace + name",
            )
            if tool.get("description"):
                notes.drop("tools[*](type=namespace).description", "a Chat upstream has no tool groups")
            for inner in tool.get("tools") or []:
                if not isinstance(inner, Mapping):
                    continue
                if inner.get("type") not in ("function", "custom"):
                    notes.drop(f"tools[*](type=namespace).tools[*](type={inner.get('type')})", _HOSTED_TOOL)
                    continue
                flat = flat_tool_name(namespace, str(inner.get("name") or ""))
                tools.append(_function_tool(inner, flat, "tools[*](type=namespace).tools[*]", notes))
        else:
            notes.drop(f"tools[*](type={kind})", _HOSTED_TOOL)
    if tools:
        chat["tools"] = tools
        chat["tool_choice"] = "auto"

    choice = body.get("tool_choice")
    if choice is None:
        return
    if not tools and choice != "none":
        notes.drop("tool_choice", "no tools left to choose from")
        return
    if choice in ("auto", "none", "required"):
        chat["tool_choice"] = choice
    elif isinstance(choice, Mapping) and choice.get("type") in ("function", "custom"):
        name = tool_map.chat_name(str(choice.get("name") or ""), choice.get("namespace"))
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif isinstance(choice, Mapping) and choice.get("type") == "allowed_tools":
        mode = choice.get("mode")
        chat["tool_choice"] = "required" if mode == "required" else "auto"
        notes.drop(
            "tool_choice.tools", f"the allow-list has no Chat equivalent; tool_choice {chat['tool_choice']}"
        )
    else:
        notes.drop("tool_choice", "hosted-tool choice has no Chat equivalent; auto used")


def _function_tool(tool: Mapping[str, Any], name: str, path: str, notes: Notes) -> JSON:
    kind = tool.get("type")
    function: JSON = {"name": name}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    if kind == "custom":
        function["parameters"] = CUSTOM_TOOL_PARAMETERS
        notes.map(
            f"{path}(type=custom)", "freeform tool sent as a function with one string parameter `input`"
        )
        if "format" in tool:
            notes.drop(f"{path}(type=custom).format", "grammar-constrained input has no Chat equivalent")
    else:
        set_parameters(function, tool.get("parameters"), tool.get("strict"))
    for key in tool:
        if key in ("type", "name", "description", "parameters", "strict", "format"):
            continue
        if key == "defer_loading":
            notes.drop(f"{path}.defer_loading", "tool sent in full; deferred loading is OpenAI tool search")
        else:
            notes.drop(f"{path}.{key}", "tool field without a Chat equivalent")
    return {"type": "function", "function": function}


def _options(body: Mapping[str, Any], name: str, notes: Notes) -> Mapping[str, Any]:
    """The object-valued option `name` of the body ({} when absent; a note when it is not an object)."""
    value = body.get(name)
    if value is not None and not isinstance(value, Mapping):
        notes.drop(name, "not an object")
    return value if isinstance(value, Mapping) else {}


def _convert_text(body: Mapping[str, Any], chat: JSON, notes: Notes) -> None:
    for key, value in _options(body, "text", notes).items():
        if key != "format":
            notes.drop(f"text.{key}", "text option without a Chat equivalent")
            continue
        kind = value.get("type") if isinstance(value, Mapping) else None
        if kind == "text":
            continue
        if kind == "json_schema" and isinstance(value, Mapping):
            schema: JSON = {"name": value.get("name") or "output", "schema": value.get("schema") or {}}
            if value.get("strict") is not None:
                schema["strict"] = value["strict"]
            chat["response_format"] = {"type": "json_schema", "json_schema": schema}
            notes.map("text.format(type=json_schema)", "response_format json_schema")
        elif kind == "json_object":
            chat["response_format"] = {"type": "json_object"}
            notes.map("text.format(type=json_object)", "response_format json_object")
        else:
            notes.drop("text.format", f"output format {kind!r} has no Chat equivalent")


def _convert_reasoning(body: Mapping[str, Any], chat: JSON, notes: Notes) -> None:
    for key, value in _options(body, "reasoning", notes).items():
        if key == "effort" and value in REASONING_EFFORTS:
            chat["reasoning_effort"] = value
            notes.map("reasoning.effort", f"reasoning_effort={value}")
        elif key == "effort" and value is not None:
            notes.drop("reasoning.effort", f"effort {value!r} is not a portable reasoning_effort")
        elif value is not None:
            notes.drop(f"reasoning.{key}", "reasoning option without a Chat equivalent")


def responses_to_tokenize_request(body: Mapping[str, Any], *, model: str | None = None) -> Translated:
    """A Responses body → a vLLM `/tokenize` body rendering the prompt the translated call would send
    (`messages`, `tools`, `add_generation_prompt: true`); for filling token ids of native calls."""
    translated = responses_to_chat_request(body, model=model)
    chat = translated.request
    request: JSON = {"model": chat.get("model"), "messages": chat["messages"], "add_generation_prompt": True}
    if chat.get("tools"):
        request["tools"] = chat["tools"]
    extra = Notes()
    for key in ("tool_choice", "parallel_tool_calls", "reasoning_effort", "response_format"):
        if key in chat:
            extra.drop(f"(chat).{key}", "/tokenize takes no such field; the prompt is rendered without it")
    return Translated(request, translated.dropped + extra.result())
