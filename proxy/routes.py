"""The fixed set of relayed routes (one per API shape in `wire.shapes`), and the `/s/{session_id}` prefix that attributes a call to a session."""

from __future__ import annotations

from dataclasses import dataclass

from records.ids import split_session_path
from wire import API_SHAPES, Api, ApiShape


@dataclass(frozen=True)
class Route:
    shape: ApiShape

    @property
    def method(self) -> str:
        return self.shape.method

    @property
    def path(self) -> str:
        return self.shape.path

    @property
    def api(self) -> Api:
        return self.shape.api

    @property
    def required(self) -> tuple[str, ...]:
        return self.shape.required

    @property
    def family(self) -> str:
        """Which error shape the client expects."""
        return self.shape.family


# One route per API shape (wire.shapes): a new API is relayed once it is registered there.
ROUTES: dict[tuple[str, str], Route] = {(s.method, s.path): Route(s) for s in API_SHAPES.values()}


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
