"""OpenCode: `opencode run --format json` with an OpenAI-compatible provider at the proxy."""

from __future__ import annotations

import json
from typing import Any

from records.agents import AgentName
from sandboxes.agents.base import AgentContext, common_env, first_value
from sandboxes.agents.npm_install import AGENT_PACKAGES


class OpenCode:
    name = AgentName.OPENCODE.value

    def files(self, ctx: AgentContext) -> dict[str, str]:
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "target": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "target",
                    "options": {"baseURL": f"{ctx.base_url}/v1", "apiKey": ctx.api_key},
                    "models": {ctx.model: {"name": ctx.model, "tool_call": True}},
                }
            },
            "model": f"target/{ctx.model}",
            "small_model": f"target/{ctx.model}",
            "autoupdate": False,
            "share": "disabled",
        }
        return {f"{ctx.home}/.config/opencode/opencode.json": json.dumps(config, indent=1)}

    def env(self, ctx: AgentContext) -> dict[str, str]:
        return common_env(ctx) | {
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
        }

    def command(self, ctx: AgentContext) -> list[str]:
        return [AGENT_PACKAGES[AgentName.OPENCODE][2], "run", "--format", "json", "--auto", ctx.task]

    def session_id(self, events: list[dict[str, Any]]) -> str | None:
        return first_value(events, "sessionID")
