"""Agent adapters: one small class per CLI behind the Agent protocol."""

from __future__ import annotations

from sandboxes.agents.base import Agent, AgentContext
from sandboxes.agents.claude_code import ClaudeCode
from sandboxes.agents.codex import Codex
from sandboxes.agents.opencode import OpenCode
from sandboxes.errors import SandboxInputError

AGENTS: dict[str, type[Agent]] = {cls.name: cls for cls in (ClaudeCode, Codex, OpenCode)}


def get_agent(name: str) -> Agent:
    try:
        return AGENTS[name]()
    except KeyError:
        raise SandboxInputError(f"unknown agent {name!r}; choose one of {', '.join(AGENTS)}") from None


__all__ = ["AGENTS", "Agent", "AgentContext", "get_agent"]
