"""A translated call's reply in the client's own API shape, rebuilt from the Chat reply the upstream sent.

The proxy records translated calls with the body the client saw; it rebuilds that body here when a spool
segment rolls, from the assembled Chat response and the client's original request."""

from __future__ import annotations

import json
from typing import Any

from wire.anthropic_response import chat_to_anthropic_message
from wire.responses_response import chat_to_responses_response


def client_view(api: str, chat: dict[str, Any], request_body: bytes) -> dict[str, Any]:
    """The client's API shape of an assembled chat response (used when recording translated calls)."""
    try:
        request = json.loads(request_body) if request_body else {}
    except ValueError:
        request = {}
    if api == "anthropic_messages":
        return chat_to_anthropic_message(chat, request)
    return chat_to_responses_response(chat, request)
