"""A spooled `Call` as a call-record row (records.CallRecord, documented in docs/schema.md), and its part.

Building a row is linear in the call's size and never needs the response in one piece: it is read block by
block (from the spool segment), decoded, and fed to the SSE assembler and the zstd compressor as it goes.
A row that cannot be built (a reply no assembler understands, a bug) becomes a row that says so, and a string
that is not valid Unicode (a lone surrogate a client sent) is escaped, so one bad call never holds back the
other calls of its segment.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import brotli
import pyarrow as pa
import zstandard

import records
from proxy.codec import decode_iter
from proxy.errors import ProxyError
from proxy.record import Call
from records.schema import CallRecord
from wire import Api, shape_of
from wire.assemble import Assembled
from wire.client_view import client_view
from wire.shapes import assemble

log = logging.getLogger(__name__)
DECODED_MAX = 1 << 30  # the largest decoded response a record holds
_TEXT_MAX = 1 << 20  # an unassembled stream's text kept in `response_json` (all of it is in stream_raw_zstd)
_SURROGATE = re.compile("[\ud800-\udfff]")


class _DecodeFailed(ProxyError):
    pass


def _ts(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, tz=UTC) if t is not None else None


def _text(b: bytes | None) -> str | None:
    return b.decode("utf-8", errors="replace") if b else None


def clean(s: str | None) -> str | None:
    """`s` as valid UTF-8 text: lone surrogates become `\\udXXX` escapes (Arrow refuses them)."""
    if s is None or not _SURROGATE.search(s):
        return s
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def to_row(call: Call, compressor: zstandard.ZstdCompressor) -> dict[str, Any]:
    try:
        return _row(call, compressor).as_row()
    except Exception as exc:
        log.warning("call %s: record could not be assembled: %r", call.call_id, exc)
        return _bare_row(call, f"record could not be assembled: {exc!r}").as_row()


def _row(call: Call, compressor: zstandard.ZstdCompressor) -> CallRecord:
    is_stream = "text/event-stream" in (call.response_content_type or "")
    try:
        result, kept, raw_z = _read_response(call, compressor, is_stream, decode=True)
        decode_error = None
    except _DecodeFailed as exc:  # recorded as it came, with the reason
        decode_error = f"cannot decode content-encoding {call.response_encoding!r}: {exc.__cause__}"
        result, kept, raw_z = _read_response(call, compressor, is_stream, decode=False)
    body = result.body
    prompt_ids = result.prompt_token_ids
    source = "upstream" if prompt_ids is not None else None
    if prompt_ids is None and call.extra.get("prompt_token_ids") is not None:
        prompt_ids, source = call.extra["prompt_token_ids"], call.extra.get("token_ids_source")
        if result.prompt_tokens is not None and len(prompt_ids) != result.prompt_tokens:
            # /tokenize renders the proxy's translation; the engine's native front end may render the
            # call otherwise (vLLM keeps Claude Code's `defer_loading` placeholder tool, the translation
            # drops it): ids the engine did not see are worse than none (docs/translation.md).
            prompt_ids = None
    if body is not None:
        body = _without_ids(body)  # the ids have their own columns; keep response_json what the client saw
    return dataclasses.replace(
        _bare_row(call, call.error or decode_error),
        stream=is_stream,
        response_json=_dumps(body) if body is not None else clean(_text(kept)),
        stream_raw_zstd=raw_z,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        prompt_token_ids=prompt_ids,
        completion_token_ids=result.completion_token_ids,
        token_ids_source=source if prompt_ids is not None else None,
        finish_reason=clean(result.finish_reason) if isinstance(result.finish_reason, str) else None,
    )


def _read_response(
    call: Call, compressor: zstandard.ZstdCompressor, is_stream: bool, *, decode: bool
) -> tuple[Assembled, bytes, bytes | None]:
    """(assembled reply, the decoded bytes kept as text, the compressed raw stream) in one pass."""
    pieces: Iterable[bytes] = call.response_pieces()
    if decode and call.response_encoding:
        pieces = _decoding(pieces, call.response_encoding)
    if not is_stream:
        data = b"".join(pieces)
        return _assembled(call, data, False), data, None
    z = compressor.compressobj()
    out: list[bytes] = []
    kept: list[bytes] = []
    sizes = [0, _TEXT_MAX]  # bytes seen, room left in `kept`

    def tee(src: Iterable[bytes]) -> Iterator[bytes]:
        for piece in src:
            out.append(z.compress(piece))
            sizes[0] += len(piece)
            if sizes[1] > 0:
                kept.append(piece[: sizes[1]])
                sizes[1] -= len(kept[-1])
            yield piece

    teed = tee(pieces)
    result = _assembled(call, teed, True)
    for _ in teed:  # whatever the assembler did not need is still compressed into the record
        pass
    out.append(z.flush())
    return result, b"".join(kept), b"".join(out) if sizes[0] else None


def _decoding(pieces: Iterable[bytes], encoding: str) -> Iterator[bytes]:
    try:
        yield from decode_iter(pieces, encoding, DECODED_MAX)
    except (ValueError, OSError, EOFError, zlib.error, brotli.error, zstandard.ZstdError) as exc:
        raise _DecodeFailed() from exc


def table(calls: list[Call], compressor: zstandard.ZstdCompressor) -> pa.Table:
    """The calls as an Arrow table of the record schema; a row Arrow refuses is replaced by the call's bare
    facts and the reason, instead of failing the part."""
    rows = [to_row(c, compressor) for c in calls]
    try:
        return pa.Table.from_pylist(rows, schema=records.SCHEMA)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        checked = [_checked(row, call) for row, call in zip(rows, calls, strict=True)]
        return pa.Table.from_pylist(checked, schema=records.SCHEMA)


def _checked(row: dict[str, Any], call: Call) -> dict[str, Any]:
    try:
        pa.Table.from_pylist([row], schema=records.SCHEMA)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        log.warning("call %s: row refused by Arrow (%r); recording its facts only", call.call_id, exc)
        return _bare_row(call, f"record could not be stored: {exc!r}").as_row()
    return row


def _bare_row(call: Call, error: str | None) -> CallRecord:
    """The columns that come from the call's facts, not from its response: a `CallRecord`, so a column
    the record does not have is a TypeError here, never a silent null column."""
    return CallRecord(
        call_id=call.call_id,
        session_id=clean(call.session_id),
        agent=clean(call.agent),
        agent_session_id=clean(call.agent_session_id),
        user_agent=clean(call.user_agent),
        tag=clean(call.tag),
        api=call.api,
        method=call.method,
        path=clean(call.path),
        model=clean(call.model) if isinstance(call.model, str) else None,
        stream="text/event-stream" in (call.response_content_type or ""),
        status_code=call.status_code,
        outcome=call.outcome,
        error=clean(error),
        request_json=clean(_text(call.request_body)),
        upstream_request_json=clean(_text(call.upstream_request_body)),
        response_content_encoding=clean(call.response_encoding),
        started_at=_ts(call.started_at),
        first_byte_at=_ts(call.first_byte_at),
        finished_at=_ts(call.finished_at),
        translated=call.translated,
        dropped_fields=[clean(f) or f for f in call.dropped_fields] or None,
        max_tokens_capped=call.max_tokens_capped,
        upstream=clean(call.upstream),
        proxy_id=clean(call.proxy_id),
    )


def _dumps(body: Any) -> str | None:
    try:
        return clean(json.dumps(body, ensure_ascii=False))
    except (ValueError, TypeError, RecursionError):
        return None


def _assembled(call: Call, data: bytes | Iterable[bytes], is_stream: bool) -> Assembled:
    """Usage and ids from what the upstream sent; the body in the client's API shape."""
    shape = shape_of(call.api)
    if call.translated and shape and shape.from_tokenize:
        return _count_tokens_from_tokenize(data if isinstance(data, bytes) else b"".join(data))
    if not call.translated or shape is None or shape.from_chat is None:
        return assemble(call.api, data, is_stream)
    chat = assemble(Api.CHAT, data, is_stream)  # what the upstream sent; the client saw it translated
    if chat.body is None or "choices" not in chat.body:
        return chat
    client = shape.summarize(client_view(call.api, chat.body, call.request_body))
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
    except (ValueError, RecursionError):
        return Assembled(errors=["tokenize reply is not JSON"])
    tokens = reply.get("tokens") if isinstance(reply, dict) else None
    if not isinstance(tokens, list):
        return Assembled(body=reply if isinstance(reply, dict) else None)
    return Assembled(body={"input_tokens": len(tokens)}, prompt_tokens=len(tokens), prompt_token_ids=tokens)
