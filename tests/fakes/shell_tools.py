"""The shell tool as each API declares it, for requests the scripted upstream answers with a call to it."""

from __future__ import annotations

from typing import Any

COMMAND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
BASH_ANTHROPIC: dict[str, Any] = {"name": "Bash", "input_schema": COMMAND_SCHEMA}
BASH_CHAT: dict[str, Any] = {"type": "function", "function": {"name": "bash", "parameters": COMMAND_SCHEMA}}
