"""A spooled `Call` as a call-record row (records.CallRecord, documented in docs/schema.md), and its part."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zstandard

import records
from proxy.codec import decode_body
from proxy.record import Call
from wire.assemble import Assembled, assemble, summarize
from wire.client_view import client_view


def _ts(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, tz=UTC) if t is not None else None


def _text(b: bytes | None) -> str | None:
    return b.decode("utf-8", errors="replace") if b else None


def to_row(call: Call, compressor: zstandard.ZstdCompressor) -> dict[str, Any]:
    raw = b"".join(call.response_chunks)
    decoded, decode_error = decode_body(raw, call.response_encoding)
    is_stream = "text/event-stream" in (call.response_content_type or "")
    result = _assembled(call, decoded, is_stream)
    body = result.body
    prompt_ids = result.prompt_token_ids
    source = "upstream" if prompt_ids is not None else None
    if prompt_ids is None and call.extra.get("prompt_token_ids") is not None:
        prompt_ids, source = call.extra["prompt_token_ids"], call.extra.get("token_ids_source")
    if body is not None:
        body = _without_ids(body)  # the ids have their own columns; keep response_json what the client saw
    return {
        "call_id": call.call_id,
        "session_id": call.session_id,
        "agent": call.agent,
        "agent_session_id": call.agent_session_id,
        "user_agent": call.user_agent,
        "tag": call.tag,
        "api": call.api,
        "method": call.method,
        "path": call.path,
        "model": call.model,
        "stream": is_stream,
        "status_code": call.status_code,
        "outcome": call.outcome,
        "error": call.error or decode_error,
        "request_json": _text(call.request_body),
        "upstream_request_json": _text(call.upstream_request_body),
        "response_json": json.dumps(body, ensure_ascii=False) if body is not None else _text(decoded),
        "stream_raw_zstd": compressor.compress(decoded) if is_stream and decoded else None,
        "response_content_encoding": call.response_encoding,
        "started_at": _ts(call.started_at),
        "first_byte_at": _ts(call.first_byte_at),
        "finished_at": _ts(call.finished_at),
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "prompt_token_ids": prompt_ids,
        "completion_token_ids": result.completion_token_ids,
        "token_ids_source": source if prompt_ids is not None else None,
        "finish_reason": result.finish_reason,
        "translated": call.translated,
        "dropped_fields": call.dropped_fields or None,
        "upstream": call.upstream,
        "proxy_id": call.proxy_id,
    }


def write_part(calls: list[Call], calls_dir: Path, name: str) -> Path:
    """Write calls as `calls_dir/name`, atomically (records.io.write_part)."""
    compressor = zstandard.ZstdCompressor(level=3)
    return records.write_part((to_row(c, compressor) for c in calls), calls_dir, name)


def _assembled(call: Call, decoded: bytes, is_stream: bool) -> Assembled:
    """Usage and ids from what the upstream sent; the body in the client's API shape."""
    if call.translated and call.api == "anthropic_count_tokens":
        return _count_tokens_from_tokenize(decoded)
    if not call.translated or call.api not in ("anthropic_messages", "openai_responses"):
        return assemble(call.api, decoded, is_stream)
    chat = assemble("openai_chat", decoded, is_stream)
    if chat.body is None or "choices" not in chat.body:
        return chat
    client = summarize(call.api, client_view(call.api, chat.body, call.request_body))
    chat.body, chat.finish_reason = client.body, client.finish_reason
    return chat


def _without_ids(body: dict[str, Any]) -> dict[str, Any]:
    if "prompt_token_ids" not in body and not any(
        isinstance(c, dict) and "token_ids" in c for c in body.get("choices") or []
    ):
        return body
    out = {k: v for k, v in body.items() if k != "prompt_token_ids"}
    out["choices"] = [
        {k: v for k, v in c.items() if k != "token_ids"} if isinstance(c, dict) else c
        for c in body.get("choices") or []
    ]
    return out


def _count_tokens_from_tokenize(decoded: bytes) -> Assembled:
    try:
        reply = json.loads(decoded)
    except ValueError:
        return Assembled(errors=["tokenize reply is not JSON"])
    tokens = reply.get("tokens") if isinstance(reply, dict) else None
    if not isinstance(tokens, list):
        return Assembled(body=reply if isinstance(reply, dict) else None)
    return Assembled(body={"input_tokens": len(tokens)}, prompt_tokens=len(tokens), prompt_token_ids=tokens)
