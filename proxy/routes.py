"""The fixed set of relayed routes, and the `/s/{session_id}` prefix that attributes a call to a session."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from records.ids import split_session_path


class Api(StrEnum):
    MESSAGES = "anthropic_messages"
    COUNT_TOKENS = "anthropic_count_tokens"
    RESPONSES = "openai_responses"
    CHAT = "openai_chat"
    COMPLETIONS = "openai_completions"
    MODELS = "models"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    api: Api
    required: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """Which error shape the client expects."""
        return "anthropic" if self.api in (Api.MESSAGES, Api.COUNT_TOKENS) else "openai"


ROUTES: dict[tuple[str, str], Route] = {
    (r.method, r.path): r
    for r in (
        Route("POST", "/v1/messages", Api.MESSAGES, ("model", "messages", "max_tokens")),
        Route("POST", "/v1/messages/count_tokens", Api.COUNT_TOKENS, ("model", "messages")),
        Route("POST", "/v1/responses", Api.RESPONSES, ("model",)),
        Route("POST", "/v1/chat/completions", Api.CHAT, ("model", "messages")),
        Route("POST", "/v1/completions", Api.COMPLETIONS, ("model", "prompt")),
        Route("GET", "/v1/models", Api.MODELS),
    )
}


@dataclass(frozen=True)
class Match:
    route: Route
    session_id: str | None
    upstream_path: str


def match(method: str, path: str) -> Match | None:
    session_id = None
    session_id, path = split_session_path(path)
    route = ROUTES.get((method, path))
    if route is None:
        return None
    return Match(route, session_id, path)


def family_for_path(path: str) -> str:
    """Error shape for a path that matched no route (best guess from the path)."""
    return "anthropic" if "/messages" in path else "openai"
