"""Responses input items → Chat messages: messages, function calls and outputs, reasoning, images."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wire.common import (
    JSON,
    Notes,
    chat_text_content,
    image_url_part,
    set_reasoning,
    text_of_parts,
)
from wire.responses_tools import ResponsesTools

_ITEM_BOOKKEEPING = ("id", "status")


class ItemBuilder:
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
