"""A translated call's reply in the client's own API shape, rebuilt from the Chat reply the upstream sent.

The proxy records translated calls with the body the client saw; it rebuilds that body here when a spool
segment rolls, from the assembled Chat response and the client's original request."""

from __future__ import annotations

import json
from typing import Any

from wire.errors import WireError
from wire.shapes import shape_of


def client_view(api: str, chat: dict[str, Any], request_body: bytes) -> dict[str, Any]:
    """The client's API shape of an assembled chat response (used when recording translated calls)."""
    try:
        request = json.loads(request_body) if request_body else {}
    except ValueError:
        request = {}
    shape = shape_of(api)
    if shape is None or shape.from_chat is None:
        raise WireError(f"{api!r} is not translated: its reply is the Chat reply itself")
    return shape.from_chat(chat, request)
