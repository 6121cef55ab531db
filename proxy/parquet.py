"""The call-record Parquet schema (documented in docs/schema.md) and atomic part writing."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from proxy.assemble import assemble
from proxy.codec import decode_body
from proxy.record import Call

_TS = pa.timestamp("us", tz="UTC")
_IDS = pa.list_(pa.int32())

SCHEMA = pa.schema(
    [
        ("call_id", pa.string()),
        ("session_id", pa.string()),
        ("agent", pa.string()),
        ("agent_session_id", pa.string()),
        ("user_agent", pa.string()),
        ("tag", pa.string()),
        ("api", pa.string()),
        ("method", pa.string()),
        ("path", pa.string()),
        ("model", pa.string()),
        ("stream", pa.bool_()),
        ("status_code", pa.int32()),
        ("outcome", pa.string()),
        ("error", pa.string()),
        ("request_json", pa.large_string()),
        ("upstream_request_json", pa.large_string()),
        ("response_json", pa.large_string()),
        ("stream_raw_zstd", pa.large_binary()),
        ("response_content_encoding", pa.string()),
        ("started_at", _TS),
        ("first_byte_at", _TS),
        ("finished_at", _TS),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("prompt_token_ids", _IDS),
        ("completion_token_ids", _IDS),
        ("token_ids_source", pa.string()),
        ("finish_reason", pa.string()),
        ("translated", pa.bool_()),
        ("dropped_fields", pa.list_(pa.string())),
        ("upstream", pa.string()),
        ("proxy_id", pa.string()),
    ]
)


def _ts(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, tz=UTC) if t is not None else None


def _text(b: bytes | None) -> str | None:
    return b.decode("utf-8", errors="replace") if b else None


def to_row(call: Call, compressor: zstandard.ZstdCompressor) -> dict[str, Any]:
    raw = b"".join(call.response_chunks)
    decoded, decode_error = decode_body(raw, call.response_encoding)
    is_stream = "text/event-stream" in (call.response_content_type or "")
    result = assemble(call.api, decoded, is_stream)
    prompt_ids = result.prompt_token_ids or call.extra.get("prompt_token_ids")
    source = call.extra.get("token_ids_source")
    if result.prompt_token_ids is not None:
        source = "upstream"
    body = result.body
    if body is not None and call.extra.get("strip_token_ids"):
        body = {k: v for k, v in body.items() if k != "prompt_token_ids"}
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
    """Write calls as `calls_dir/name`, atomically: a hidden temp file, fsync, rename, fsync the dir."""
    calls_dir.mkdir(parents=True, exist_ok=True)
    compressor = zstandard.ZstdCompressor(level=3)
    table = pa.Table.from_pylist([to_row(c, compressor) for c in calls], schema=SCHEMA)
    final = calls_dir / name
    # pyarrow.dataset ignores names starting with "." — readers never see a half-written part.
    tmp = calls_dir / f".{name}.{os.getpid()}.tmp"
    pq.write_table(table, tmp, compression="zstd")
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    dfd = os.open(calls_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return final
