"""The Agent protocol and what one agent run produces."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class AgentContext:
    """What an adapter needs to point its CLI at the proxy for one session."""

    base_url: str  # the proxy as the sandbox sees it, with the session prefix: http://gw:port/s/{session}
    api_key: str  # a per-session dummy key; never the upstream key
    model: str
    task: str
    home: str
    workdir: str


class Agent(Protocol):
    name: str

    def files(self, ctx: AgentContext) -> dict[str, str]:
        """Config files to write inside the sandbox: absolute path -> text."""
        ...

    def env(self, ctx: AgentContext) -> dict[str, str]: ...

    def command(self, ctx: AgentContext) -> list[str]: ...

    def session_id(self, events: list[dict[str, Any]]) -> str | None:
        """The agent's own session id, read from its JSON transcript."""
        ...


def parse_jsonl(text: str) -> list[dict[str, Any]]:
    """JSON-lines transcript; lines that are not JSON objects are kept as {"raw": line}."""
    events: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            value = json.loads(line)
        except ValueError:
            events.append({"raw": line})
            continue
        events.append(value if isinstance(value, dict) else {"raw": line})
    return events


def first_value(events: list[dict[str, Any]], key: str) -> str | None:
    """The first string under `key`, searched at the top level and one level down (event payloads)."""
    for event in events:
        for scope in (event, *(v for v in event.values() if isinstance(v, dict))):
            value = scope.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def common_env(ctx: AgentContext) -> dict[str, str]:
    return {
        "HOME": ctx.home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
    }
