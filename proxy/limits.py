"""Completion limits the target can honour: the agents ask for up to 32,000 tokens, which a vLLM serving
a smaller context refuses outright (`max_tokens=32000 cannot be greater than max_model_len=8192`).

A call's limit is lowered to the served context (`--served-context`, read from the upstream's /v1/models
at start when not given) and, with `--max-tokens-cap`, to that cap, which is also set when the client
sent none (Codex sends none; a CPU target would then decode to the end of its context). vLLM itself
shortens a limit that fits its context but not beside the prompt, so the prompt's length is not needed
here. The limit sent is recorded on the row (`max_tokens_capped`); the client's own stays in `request_json`.
"""

from __future__ import annotations

from typing import Any

from wire import shape_of


def capped(
    api: str, body: dict[str, Any], cap: int | None, context: int | None
) -> tuple[dict[str, Any], int] | None:
    """(the body with its completion limit lowered, the limit sent), or None when it stands as sent."""
    shape = shape_of(api)
    fields = shape.limit_fields if shape else ()  # the field(s) the API names its limit by (ApiShape)
    bounds = [b for b in (cap, context) if b is not None]
    if not fields or not bounds:
        return None
    limit = min(bounds)
    present = [f for f in fields if isinstance(body.get(f), int) and not isinstance(body.get(f), bool)]
    if present:
        if all(body[f] <= limit for f in present):
            return None
        return {**body, **{f: min(body[f], limit) for f in present}}, limit
    if cap is None:
        return None  # no limit sent: the engine stops at the end of its context by itself
    return {**body, fields[0]: limit}, limit
