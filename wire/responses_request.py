"""OpenAI Responses request → Chat Completions request."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wire.common import (
    JSON,
    REASONING_EFFORTS,
    Notes,
    Translated,
    chat_text_content,
    image_url_part,
    merge_leading_system,
    set_reasoning,
    stream_fields,
    text_of_parts,
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
_ITEM_BOOKKEEPING = ("id", "status")


def flat_tool_name(namespace: str, name: str) -> str:
    """The Chat function name of a function inside a Responses `namespace` tool."""
    if namespace.endswith(("_", ".", "/", ":", "-")):
        return f"{namespace}{name}"
    return f"{namespace}__{name}"


@dataclass(slots=True)
class ResponsesTools:
    """How the Responses tools of a request map to Chat function names, and back.

    `custom`: Chat names of freeform (`type: custom`) tools, sent as functions with one string parameter
    `input`; `namespaced`: Chat name → (namespace, name) for functions flattened out of `namespace` tools.
    """

    custom: set[str] = field(default_factory=set)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)

    def chat_name(self, name: str, namespace: str | None = None) -> str:
        return flat_tool_name(namespace, name) if namespace else name


def responses_tool_map(tools: Any) -> ResponsesTools:
    found = ResponsesTools()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") == "custom" and isinstance(tool.get("name"), str):
            found.custom.add(tool["name"])
        elif tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            for inner in tool.get("tools") or []:
                if isinstance(inner, Mapping) and isinstance(inner.get("name"), str):
                    flat = flat_tool_name(tool["name"], inner["name"])
                    found.namespaced[flat] = (tool["name"], inner["name"])
                    if inner.get("type") == "custom":
                        found.custom.add(flat)
    return found


CUSTOM_TOOL_PARAMETERS: JSON = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's raw input."}},
    "required": ["input"],
    "additionalProperties": False,
}


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

    builder = _Builder(notes, tool_map)
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
    stream_fields(chat, bool(body.get("stream")), return_token_ids)

    handled = {
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
    for key in body:
        if key not in handled:
            notes.drop(key, _DROPPED_TOP.get(key, "field unknown to the translation; not sent upstream"))
    return Translated(chat, notes.result())


class _Builder:
    """Turns input items into chat messages: consecutive reasoning / assistant message / function_call items
    make one assistant message; function_call_output items make `role: tool` messages."""

    def __init__(self, notes: Notes, tools: ResponsesTools) -> None:
        self.notes = notes
        self.tools = tools
        self.out: list[JSON] = []
        self.assistant: JSON | None = None
        self.moved_images: list[JSON] = []

    # assistant turn assembly

    def _assistant(self) -> JSON:
        if self.assistant is None:
            self.assistant = {"role": "assistant", "content": None}
        return self.assistant

    def flush_assistant(self) -> None:
        message, self.assistant = self.assistant, None
        if message is None:
            return
        if message["content"] is None and not message.get("tool_calls"):
            message["content"] = ""
        self.out.append(message)

    def _end_tool_run(self, next_is_user: bool) -> list[JSON]:
        images, self.moved_images = self.moved_images, []
        if images and not next_is_user:
            self.out.append({"role": "user", "content": images})
            return []
        return images

    def close(self) -> None:
        self.flush_assistant()
        self._end_tool_run(False)

    def out_message(self, role: str, content: str | list[JSON]) -> None:
        self.flush_assistant()
        self._end_tool_run(False)
        self.out.append({"role": role, "content": content})

    # items

    def item(self, item: Any, path: str) -> None:
        if isinstance(item, str):
            self.out_message("user", item)
            return
        if not isinstance(item, Mapping):
            self.notes.drop(path, "not an object")
            return
        kind = item.get("type") or ("message" if "role" in item else None)
        path = f"{path}(type={kind})"
        for key in _ITEM_BOOKKEEPING:
            if key in item:
                self.notes.drop(f"{path}.{key}", "item bookkeeping; not sent upstream")
        if kind == "message":
            self._message(item, path)
        elif kind in ("function_call", "custom_tool_call"):
            self._call(item, kind, path)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self._output(item, path)
        elif kind == "reasoning":
            self._reasoning(item, path)
        else:
            self.notes.drop(path, "input item without a Chat equivalent")

    def _message(self, item: Mapping[str, Any], path: str) -> None:
        role = item.get("role")
        if "phase" in item:
            self.notes.drop(f"{path}.phase", "assistant message phase has no Chat equivalent")
        content = item.get("content")
        if role == "assistant":
            parts = self._parts(content, path, assistant=True)
            if self.assistant is not None and self.assistant.get("tool_calls"):
                self.flush_assistant()
            self._end_tool_run(False)
            message = self._assistant()
            if parts:
                existing = message["content"]
                if isinstance(existing, str):
                    existing = [{"type": "text", "text": existing}]
                message["content"] = chat_text_content([*(existing or []), *parts])
            return
        if role in ("system", "developer"):
            if role == "developer":
                self.notes.map(
                    f"{path[: -len('(type=message)')]}(role=developer)", "sent as a system message"
                )
            parts = self._parts(content, path, assistant=False)
            self.out_message("system", chat_text_content(parts) if parts else "")
            return
        if role != "user":
            self.notes.drop(f"{path}.role", f"unknown role {role!r}; treated as user")
        self.flush_assistant()
        images = self._end_tool_run(True)
        parts = [*images, *self._parts(content, path, assistant=False)]
        self.out.append({"role": "user", "content": chat_text_content(parts) if parts else ""})

    def _parts(self, content: Any, path: str, *, assistant: bool) -> list[JSON]:
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        parts: list[JSON] = []
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            part_path = f"{path}.content[*](type={kind})"
            if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
                parts.append({"type": "text", "text": part.get("text") or ""})
                if part.get("annotations"):
                    self.notes.drop(f"{part_path}.annotations", "annotations have no Chat equivalent")
                if part.get("logprobs"):
                    self.notes.drop(f"{part_path}.logprobs", "logprobs are not sent upstream")
            elif kind == "refusal":
                parts.append({"type": "text", "text": part.get("refusal") or ""})
                self.notes.map(part_path, "refusal sent as text")
            elif kind == "input_image" and not assistant:
                image = self._image(part, part_path)
                if image is not None:
                    parts.append(image)
            else:
                self.notes.drop(part_path, "content part without a Chat equivalent")
        return parts

    def _image(self, part: Mapping[str, Any], path: str) -> JSON | None:
        if part.get("detail") not in (None, "auto"):
            self.notes.drop(f"{path}.detail", "image detail is not portable; the upstream default is used")
        url = part.get("image_url")
        if isinstance(url, Mapping):
            url = url.get("url")
        if not isinstance(url, str) or not url:
            self.notes.drop(path, "image by file id cannot be sent upstream")
            return None
        return image_url_part(url)

    def _call(self, item: Mapping[str, Any], kind: str, path: str) -> None:
        self._end_tool_run(False)
        name = item.get("name") or ""
        namespace = item.get("namespace")
        chat_name = self.tools.chat_name(name, namespace if isinstance(namespace, str) else None)
        if namespace:
            self.notes.map(f"{path}.namespace", "function name flattened with its namespace")
        if kind == "custom_tool_call":
            arguments = json.dumps({"input": item.get("input") or ""}, ensure_ascii=False)
            self.notes.map(path, "freeform tool call sent as a function call with arguments {input}")
        else:
            raw = item.get("arguments")
            arguments = raw if isinstance(raw, str) else json.dumps(raw or {}, ensure_ascii=False)
        message = self._assistant()
        message.setdefault("tool_calls", []).append(
            {
                "id": item.get("call_id") or "",
                "type": "function",
                "function": {"name": chat_name, "arguments": arguments},
            }
        )

    def _output(self, item: Mapping[str, Any], path: str) -> None:
        self.flush_assistant()
        output = item.get("output")
        if isinstance(output, str):
            text = output
        elif isinstance(output, list):
            texts: list[str] = []
            for part in output:
                if not isinstance(part, Mapping):
                    continue
                kind = part.get("type")
                if kind in ("input_text", "output_text", "text"):
                    texts.append(str(part.get("text") or ""))
                elif kind == "input_image":
                    image = self._image(part, f"{path}.output[*](type=input_image)")
                    if image is not None:
                        self.moved_images.append(image)
                        self.notes.map(
                            f"{path}.output[*](type=input_image)",
                            "Chat tool messages carry text only; the image goes in a user message after the tool results",
                        )
                else:
                    self.notes.drop(
                        f"{path}.output[*](type={kind})", "tool output part without a Chat equivalent"
                    )
            text = "\n".join(texts)
        else:
            text = "" if output is None else json.dumps(output, ensure_ascii=False)
        self.out.append({"role": "tool", "tool_call_id": item.get("call_id") or "", "content": text})

    def _reasoning(self, item: Mapping[str, Any], path: str) -> None:
        self._end_tool_run(False)
        content = item.get("content")
        text = text_of_parts(content, ("reasoning_text", "text")) if isinstance(content, list) else ""
        summary = item.get("summary")
        summary_text = text_of_parts(summary, ("summary_text",), "\n\n") if isinstance(summary, list) else ""
        if text and summary_text:
            self.notes.drop(f"{path}.summary", "the full reasoning text is sent; its summary is not")
        elif summary_text:
            text = summary_text
            self.notes.map(f"{path}.summary", "only a summary is available; it is sent as the reasoning")
        if item.get("encrypted_content"):
            self.notes.drop(
                f"{path}.encrypted_content", "encrypted reasoning cannot be shown to another model"
            )
        if self.assistant is not None and (
            self.assistant["content"] is not None or self.assistant.get("tool_calls")
        ):
            self.flush_assistant()
        message = self._assistant()
        if text:
            previous = message.get("reasoning")
            set_reasoning(message, f"{previous}\n\n{text}" if previous else text)


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
        function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
    for key in tool:
        if key in ("type", "name", "description", "parameters", "strict", "format"):
            continue
        if key == "defer_loading":
            notes.drop(f"{path}.defer_loading", "tool sent in full; deferred loading is OpenAI tool search")
        else:
            notes.drop(f"{path}.{key}", "tool field without a Chat equivalent")
    return {"type": "function", "function": function}


def _convert_text(body: Mapping[str, Any], chat: JSON, notes: Notes) -> None:
    text = body.get("text")
    if text is None:
        return
    if not isinstance(text, Mapping):
        notes.drop("text", "not an object")
        return
    for key, value in text.items():
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
    reasoning = body.get("reasoning")
    if reasoning is None:
        return
    if not isinstance(reasoning, Mapping):
        notes.drop("reasoning", "not an object")
        return
    for key, value in reasoning.items():
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
