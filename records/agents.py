"""The agent CLIs the factory drives, by the names the call records carry in their ``agent`` column.

The one place these names are spelled: the proxy attributes a call to one of them, the planner mixes
sessions over them, the sandboxes register an adapter under each, the trainer groups its figures by them.
A fourth agent is one member here plus its adapter (docs/architecture.md, "How to add").
"""

from __future__ import annotations

from enum import StrEnum


class AgentName(StrEnum):
    CLAUDE_CODE = "claude-code"
    CODEX = "codex"
    OPENCODE = "opencode"


AGENT_NAMES: tuple[str, ...] = tuple(a.value for a in AgentName)
OTHER_AGENT = "other"  # a call whose User-Agent names none of them
