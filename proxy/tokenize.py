"""Fill `prompt_token_ids` of native (untranslated) Anthropic/Responses calls from the upstream's /tokenize.

Runs in the roller thread when a spool segment rolls, so it never delays a relayed response. The
request is rendered the way a Chat upstream would render it (the same translation chat mode uses).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx

from proxy.record import Call
from wire import shape_of

log = logging.getLogger(__name__)
TOKENIZE_FLAG = "tokenize"


def tokenize_request(call: Call) -> dict[str, Any] | None:
    shape = shape_of(call.api)
    if shape is None or not shape.fills_prompt_ids or shape.tokenize is None:
        return None
    try:
        body = json.loads(call.request_body)
    except ValueError:
        return None
    return shape.tokenize(body).request


class TokenizeFiller:
    def __init__(self, upstream: str, key: str | None, timeout_s: float = 30.0) -> None:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(base_url=upstream, headers=headers, timeout=timeout_s)

    def __call__(self, calls: list[Call]) -> None:
        for call in calls:
            if not call.extra.get(TOKENIZE_FLAG) or call.outcome != "ok":
                continue
            req = tokenize_request(call)
            if req is None:
                continue
            try:
                r = self._client.post("/tokenize", json=req)
                tokens = r.json().get("tokens") if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("tokenize for call %s failed: %s", call.call_id, exc)
                continue
            if isinstance(tokens, list):
                call.extra["prompt_token_ids"] = tokens
                call.extra["token_ids_source"] = "tokenize"

    def close(self) -> None:
        self._client.close()
