"""Anthropic Messages request → Chat Completions request (and `count_tokens` → vLLM `/tokenize`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wire.common import (
    BILLING_HEADER_PREFIX,
    JSON,
    REASONING_EFFORTS,
    Notes,
    Translated,
    chat_text_content,
    image_url_part,
    int_or_zero,
    set_reasoning,
    stream_fields,
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
        leading.append(
            _system_text(messages.pop(0).get("content"), "messages[*]", notes, keep_billing_header)
        )
    if leading:
        notes.map("messages[*](role=system)", "leading system message joined into the chat system message")
    system = _system_text(body.get("system"), "system", notes, keep_billing_header)
    out: list[JSON] = []
    joined = "\n\n".join(t for t in (system, *leading) if t)
    if joined:
        out.append({"role": "system", "content": joined})
    for message in _move_out_of_tool_runs(messages, notes):
        _convert_message(message, out, notes, keep_billing_header)
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
    stream_fields(chat, bool(body.get("stream")), return_token_ids)

    handled = {
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
    for key in body:
        if key in handled:
            continue
        notes.drop(key, _DROPPED_TOP.get(key, "field unknown to the translation; not sent upstream"))
    return Translated(chat, notes.result())


# --- system ------------------------------------------------------------------------------------------


def _system_text(content: Any, path: str, notes: Notes, keep_billing_header: bool) -> str:
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


def _move_out_of_tool_runs(messages: list[Any], notes: Notes) -> list[Any]:
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


def _convert_message(message: Any, out: list[JSON], notes: Notes, keep_billing_header: bool) -> None:
    if not isinstance(message, Mapping):
        notes.drop("messages[*]", "not an object")
        return
    role = message.get("role")
    content = message.get("content")
    if role == "system":
        text = _system_text(content, "messages[*]", notes, keep_billing_header)
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
        function["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
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
