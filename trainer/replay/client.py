"""One replayed call against one endpoint: streamed, timed, its output ids (or text) kept for comparison."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from trainer.replay.calls import ReplayCall
from trainer.replay.counters import SpecCounters
from wire.sse import DONE, SSEDecoder


@dataclass
class Outcome:
    call_id: str
    endpoint: str
    concurrency: int
    group: str
    error: str | None = None
    token_ids: list[int] | None = None
    text: str = ""
    completion_tokens: int = 0
    ttft: float | None = None
    seconds: float = 0.0
    spec: SpecCounters | None = None  # the counters' change around the call (concurrency 1 only)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def decode_seconds(self) -> float:
        """Time after the first token (the whole request when none was timed)."""
        return self.seconds - self.ttft if self.ttft is not None else self.seconds

    @property
    def tokens_per_s(self) -> float | None:
        """Decode rate: tokens after the first per second after it."""
        if not self.ok or self.decode_seconds <= 0:
            return None
        return max(self.completion_tokens - 1, 0) / self.decode_seconds

    def output(self) -> tuple[str, Any]:
        """What two endpoints' replies are compared by: the token ids when both sent them, else the text."""
        return ("ids", tuple(self.token_ids)) if self.token_ids is not None else ("text", self.text)


def request_for(call: ReplayCall, model: str) -> tuple[str, dict[str, Any]]:
    """(path, body): the exact prompt ids on /v1/completions; a chat body only for rows without ids."""
    common = {
        "model": model,
        "max_tokens": call.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,  # vLLM ≥ 0.10.2 and the stand-in; others ignore it (text is compared)
    }
    if call.prompt_ids is not None:
        return "/v1/completions", {**common, "prompt": call.prompt_ids}
    chat = {k: v for k, v in (call.chat or {}).items() if k in ("messages", "tools", "tool_choice")}
    chat.update(common)
    return "/v1/chat/completions", chat


def _error_message(status: int, body: bytes) -> str:
    try:
        err = json.loads(body).get("error")
        message = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {status}: {message or body[:300].decode(errors='replace') or 'no body'}"


def _absorb(out: Outcome, event: dict[str, Any], started: float) -> None:
    """Fold one streamed chunk (Completions or Chat) into `out`."""
    if "error" in event:
        err = event["error"]
        out.error = f"stream error: {err.get('message') if isinstance(err, dict) else err}"
        return
    for choice in event.get("choices") or []:
        piece = choice.get("text")
        if piece is None:
            delta = choice.get("delta") or {}
            piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
        ids = choice.get("token_ids")
        if (piece or ids) and out.ttft is None:
            out.ttft = time.perf_counter() - started
        out.text += piece or ""
        if ids is not None:
            out.token_ids = [*(out.token_ids or []), *ids]
    usage = event.get("usage")
    if usage and usage.get("completion_tokens") is not None:
        out.completion_tokens = int(usage["completion_tokens"])


async def send(
    client: httpx.AsyncClient, url: str, model: str, call: ReplayCall, label: str, concurrency: int
) -> Outcome:
    """Replay `call` on `url`; every failure (refused, unreachable, broken stream) is the outcome's error."""
    out = Outcome(call.call_id, label, concurrency, call.group)
    path, body = request_for(call, model)
    started = time.perf_counter()
    try:
        async with client.stream("POST", url + path, json=body) as reply:
            if reply.status_code >= 400:
                out.error = _error_message(reply.status_code, await reply.aread())
                return out
            decoder = SSEDecoder()
            async for raw in reply.aiter_bytes():
                for event in decoder.feed(raw):
                    if event != DONE and isinstance(event, dict):
                        _absorb(out, event, started)
    except httpx.HTTPError as e:
        out.error = f"{type(e).__name__}: {e or 'no detail'} ({url})"
    out.seconds = time.perf_counter() - started
    if out.ok and not out.completion_tokens and out.token_ids is not None:
        out.completion_tokens = len(out.token_ids)
    return out
