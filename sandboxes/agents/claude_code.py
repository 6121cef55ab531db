"""Claude Code: `claude -p` with stream-json output, pointed at the proxy's Anthropic Messages route."""

from __future__ import annotations

from typing import Any

from records.agents import AgentName
from sandboxes.agents.base import AgentContext, common_env, first_value


class ClaudeCode:
    name = AgentName.CLAUDE_CODE.value

    def files(self, ctx: AgentContext) -> dict[str, str]:
        return {}

    def env(self, ctx: AgentContext) -> dict[str, str]:
        return common_env(ctx) | {
            "ANTHROPIC_BASE_URL": ctx.base_url,
            "ANTHROPIC_AUTH_TOKEN": ctx.api_key,
            "ANTHROPIC_MODEL": ctx.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": ctx.model,
            "ANTHROPIC_SMALL_FAST_MODEL": ctx.model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            # The sandbox runs it as a non-root user; should an operator run it as root, the flag needs this.
            "IS_SANDBOX": "1",
        }

    def command(self, ctx: AgentContext) -> list[str]:
        return [
            "claude",
            "-p",
            ctx.task,
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
        ]

    def session_id(self, events: list[dict[str, Any]]) -> str | None:
        return first_value(events, "session_id")
