"""How a Responses request's tools map to Chat function names and back (namespaces, freeform tools)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wire.common import JSON


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
