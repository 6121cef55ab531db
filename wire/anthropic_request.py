"""Anthropic Messages request → Chat Completions request (and `count_tokens` → vLLM `/tokenize`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wire.anthropic_messages import convert_message, move_out_of_tool_runs, system_text
from wire.common import (
    JSON,
    REASONING_EFFORTS,
    Notes,
    Translated,
    finish_request,
    int_or_zero,
    set_parameters,
)

# Top-level fields handled below; anything else is reported as dropped.
_PASSTHROUGH = ("max_tokens", "temperature", "top_p")
_DROPPED_TOP: dict[str, str] = {
    "metadata": "request metadata (user id) is not sent upstream",
    "context_management": "server-side context editing is Anthropic's; the upstream sees the conversation as sent",
    "service_tier": "no service tiers upstream",
    "container": "Anthropic code-execution containers have no Chat equivalent",
    "mcp_servers": "Anthropic's MCP connector has no Chat equivalent",
}
_CACHE_NOTE = "prompt-caching hint; a Chat upstream caches prefixes by itself"


# Top-level fields this translation reads; every other field is dropped with a note.
_HANDLED = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "stop_sequences",
        "stream",
        "thinking",
        "output_config",
        "output_format",
        "top_k",
        "chat_template_kwargs",
        *_PASSTHROUGH,
    }
)


def anthropic_to_chat_request(
    body: Mapping[str, Any],
    *,
    model: str | None = None,
    return_token_ids: bool = False,
    keep_billing_header: bool = False,
) -> Translated:
    """Translate an Anthropic Messages body into one Chat Completions body.

    `model` replaces the client's model name; `return_token_ids` asks vLLM for prompt and completion ids;
    `keep_billing_header` keeps Claude Code's per-request `x-anthropic-billing-header` system block (dropped
    by default, as vLLM's own `/v1/messages` does, so prompt prefixes stay cacheable).
    """
    notes = Notes()
    chat: JSON = {"model": model if model is not None else body.get("model")}
    if model is not None and model != body.get("model"):
        notes.map("model", f"replaced by the upstream model {model!r}")

    messages = list(body.get("messages") or [])
    leading: list[str] = []
    while messages and isinstance(messages[0], Mapping) and messages[0].get("role") == "system":
        leading.append(system_text(messages.pop(0).get("content"), "messages[*]", notes, keep_billing_header))
    if leading:
        notes.map("messages[*](role=system)", "leading system message joined into the chat system message")
    system = system_text(body.get("system"), "system", notes, keep_billing_header)
    out: list[JSON] = []
    joined = "\n\n".join(t for t in (system, *leading) if t)
    if joined:
        out.append({"role": "system", "content": joined})
    for message in move_out_of_tool_runs(messages, notes):
        convert_message(message, out, notes, keep_billing_header)
    chat["messages"] = out

    _convert_tools(body, chat, notes)
    for key in _PASSTHROUGH:
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("top_k") is not None:
        chat["top_k"] = body["top_k"]
        notes.map("top_k", "sent as the `top_k` sampling extension (vLLM, SGLang, llama.cpp)")
    if body.get("stop_sequences"):
        chat["stop"] = list(body["stop_sequences"])
    _convert_thinking(body, chat, notes)
    _convert_output_config(body, chat, notes)
    if isinstance(body.get("chat_template_kwargs"), Mapping):
        chat["chat_template_kwargs"] = {
            **body["chat_template_kwargs"],
            **chat.get("chat_template_kwargs", {}),
        }
    return finish_request(chat, body, notes, _HANDLED, _DROPPED_TOP, return_token_ids)


# --- tools and options -------------------------------------------------------------------------------


def tool_search_loaded(messages: Any) -> set[str]:
    """Names of deferred tools that tool search has loaded: `tool_reference` blocks in tool results."""
    names: set[str] = set()
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, Mapping) else None
        for block in content if isinstance(content, list) else []:
            inner = block.get("content") if isinstance(block, Mapping) else None
            for item in [block, *(inner if isinstance(inner, list) else [])]:
                if isinstance(item, Mapping) and item.get("type") == "tool_reference":
                    name = item.get("tool_name") or item.get("name")
                    if isinstance(name, str):
                        names.add(name)
    return names


def _convert_tools(body: Mapping[str, Any], chat: JSON, notes: Notes) -> None:
    loaded = tool_search_loaded(body.get("messages"))
    tools: list[JSON] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        kind = tool.get("type")
        if kind not in (None, "custom"):
            notes.drop(
                f"tools[*](type={kind})", "Anthropic server / built-in tool; a Chat upstream cannot run it"
            )
            continue
        if tool.get("defer_loading") is True:
            if tool.get("name") not in loaded:
                notes.drop(
                    "tools[*](defer_loading=true)",
                    "deferred tool not shown to the model until tool search loads it, as Anthropic does",
                )
                continue
            notes.map("tools[*](defer_loading=true)", "deferred tool loaded by tool search: sent in full")
        function: JSON = {"name": tool.get("name") or ""}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        set_parameters(function, tool.get("input_schema"), tool.get("strict"))
        for key in tool:
            if key in ("type", "name", "description", "input_schema", "strict", "defer_loading"):
                continue
            if key == "cache_control":
                notes.drop("tools[*].cache_control", _CACHE_NOTE)
            else:
                notes.drop(f"tools[*].{key}", "tool field without a Chat equivalent")
        tools.append({"type": "function", "function": function})

    choice = body.get("tool_choice")
    if tools:
        chat["tools"] = tools
        chat["tool_choice"] = "auto"
    if not isinstance(choice, Mapping):
        return
    kind = choice.get("type")
    if not tools and kind != "none":
        notes.drop("tool_choice", "no tools left to choose from")
        return
    if kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name") or ""}}
    elif kind in ("auto", "none"):
        chat["tool_choice"] = kind
    else:
        notes.drop("tool_choice", f"unknown tool_choice type {kind!r}; auto used")
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False
        notes.map("tool_choice.disable_parallel_tool_use", "parallel_tool_calls: false")


def _convert_thinking(body: Mapping[str, Any], chat: JSON, notes: Notes) -> None:
    thinking = body.get("thinking")
    if not isinstance(thinking, Mapping):
        if thinking is not None:
            notes.drop("thinking", "not an object")
        return
    kind = thinking.get("type")
    if kind in ("enabled", "adaptive"):
        enable = True
    elif kind == "disabled":
        enable = False
    else:
        notes.drop("thinking", f"unknown thinking type {kind!r}")
        return
    chat.setdefault("chat_template_kwargs", {})["enable_thinking"] = enable
    notes.map(f"thinking(type={kind})", f"chat_template_kwargs.enable_thinking={str(enable).lower()}")
    for key in thinking:
        if key == "budget_tokens":
            notes.drop("thinking.budget_tokens", "no portable thinking budget on Chat upstreams")
        elif key != "type":
            notes.drop(f"thinking.{key}", "thinking option without a Chat equivalent")


def _json_schema_format(fmt: Any) -> JSON | None:
    if (
        isinstance(fmt, Mapping)
        and fmt.get("type") == "json_schema"
        and isinstance(fmt.get("schema"), Mapping)
    ):
        return {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": fmt["schema"], "strict": True},
        }
    return None


def _convert_output_config(body: Mapping[str, Any], chat: JSON, notes: Notes) -> None:
    config = body.get("output_config")
    if isinstance(config, Mapping):
        for key, value in config.items():
            if key == "effort" and value in REASONING_EFFORTS:
                chat["reasoning_effort"] = value
                notes.map("output_config.effort", f"reasoning_effort={value}")
            elif key == "effort":
                notes.drop("output_config.effort", f"effort {value!r} is not a portable reasoning_effort")
            elif key == "format" and (fmt := _json_schema_format(value)) is not None:
                chat["response_format"] = fmt
                notes.map("output_config.format", "response_format json_schema")
            else:
                notes.drop(f"output_config.{key}", "output option without a Chat equivalent")
    elif config is not None:
        notes.drop("output_config", "not an object")
    legacy = body.get("output_format")
    if legacy is not None:
        if (fmt := _json_schema_format(legacy)) is not None:
            chat["response_format"] = fmt
            notes.map("output_format", "response_format json_schema")
        else:
            notes.drop("output_format", "output format without a Chat equivalent")


# --- count_tokens ------------------------------------------------------------------------------------


def count_tokens_to_tokenize_request(
    body: Mapping[str, Any], *, model: str | None = None, keep_billing_header: bool = False
) -> Translated:
    """A `/v1/messages/count_tokens` body → a vLLM `/tokenize` body rendering the same prompt the
    translated Messages call would (`messages`, `tools`, `add_generation_prompt: true`)."""
    translated = anthropic_to_chat_request(body, model=model, keep_billing_header=keep_billing_header)
    chat = translated.request
    request: JSON = {"model": chat.get("model"), "messages": chat["messages"], "add_generation_prompt": True}
    if chat.get("tools"):
        request["tools"] = chat["tools"]
    if chat.get("chat_template_kwargs"):
        request["chat_template_kwargs"] = chat["chat_template_kwargs"]
    notes = list(translated.dropped)
    dropped_keys = [k for k in ("tool_choice", "parallel_tool_calls", "reasoning_effort") if k in chat]
    extra = Notes()
    for key in dropped_keys:
        extra.drop(f"(chat).{key}", "/tokenize takes no such field; the prompt is rendered without it")
    return Translated(request, notes + extra.result())


def tokenize_to_count_tokens(reply: Mapping[str, Any]) -> JSON:
    """A vLLM `/tokenize` reply (`{"count": n, "tokens": [...]}`) → Anthropic's `{"input_tokens": n}`."""
    count = reply.get("count")
    if not isinstance(count, int) or isinstance(count, bool):
        tokens = reply.get("tokens")
        count = len(tokens) if isinstance(tokens, list) else 0
    return {"input_tokens": int_or_zero(count)}
