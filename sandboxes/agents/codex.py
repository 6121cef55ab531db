"""Codex CLI: `codex exec --json` with a Responses-API provider at the proxy."""

from __future__ import annotations

import json
from typing import Any

from records.agents import AgentName
from sandboxes.agents.base import AgentContext, common_env, first_value
from sandboxes.agents.npm_install import AGENT_PACKAGES


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


class Codex:
    name = AgentName.CODEX.value

    def _codex_home(self, ctx: AgentContext) -> str:
        return f"{ctx.home}/.codex"

    def files(self, ctx: AgentContext) -> dict[str, str]:
        config = "\n".join(
            [
                f"model = {_toml(ctx.model)}",
                'model_provider = "target"',
                'approval_policy = "never"',
                'sandbox_mode = "danger-full-access"',
                "check_for_update_on_startup = false",
                "[model_providers.target]",
                'name = "target"',
                f"base_url = {_toml(ctx.base_url + '/v1')}",
                'env_key = "TARGET_API_KEY"',
                'wire_api = "responses"',  # the only wire API codex 0.17x has
                "[analytics]",
                "enabled = false",
                "[features]",
                "plugins = false",
                "",
            ]
        )
        return {f"{self._codex_home(ctx)}/config.toml": config}

    def env(self, ctx: AgentContext) -> dict[str, str]:
        return common_env(ctx) | {"CODEX_HOME": self._codex_home(ctx), "TARGET_API_KEY": ctx.api_key}

    def command(self, ctx: AgentContext) -> list[str]:
        return [AGENT_PACKAGES[AgentName.CODEX][2], "exec", "--json", ctx.task]

    def session_id(self, events: list[dict[str, Any]]) -> str | None:
        return first_value(events, "thread_id") or first_value(events, "session_id")
