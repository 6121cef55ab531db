"""Who made a call: the agent (from User-Agent) and the agent's own session id (from its header)."""

from __future__ import annotations

from collections.abc import Mapping

from records.agents import OTHER_AGENT, AgentName

# Order matters: a UA may mention several products; the first match wins.
_AGENT_MARKERS = (
    (AgentName.CLAUDE_CODE, ("claude-cli", "claude-code", "claude_code")),
    (AgentName.CODEX, ("codex",)),
    (AgentName.OPENCODE, ("opencode",)),
)
# Claude Code; Codex (session-id, else thread-id); OpenCode.
_SESSION_HEADERS = ("x-claude-code-session-id", "session-id", "thread-id", "x-session-id")


def agent_from_user_agent(user_agent: str | None) -> str:
    ua = (user_agent or "").lower()
    for agent, markers in _AGENT_MARKERS:
        if any(m in ua for m in markers):
            return agent.value
    return OTHER_AGENT


def agent_session_id(headers: Mapping[str, str]) -> str | None:
    for name in _SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return value[:256]
    return None
