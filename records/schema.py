"""`CallRecord`: one model call as the proxy records it, and the Arrow schema derived from it.

The dataclass is the single definition: each field's Arrow type is written next to it (`Annotated`), and
`SCHEMA` is built from the annotations, so a column cannot exist in one place and not the other.
docs/schema.md describes every column.

Versions (stored in each Parquet file's metadata under `dflash.schema_version`):
- 1: parts written before this package existed (no version in the metadata); the same columns as 2.
- 2: the columns below but `max_tokens_capped`.
- 3: `max_tokens_capped` added (null in older parts).
- 4: `regenerated_from` added (null in older parts and in every row the proxy records).
A reader brings every version to the current one with `records.io.conform`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Annotated, Any, get_type_hints

import pyarrow as pa

SCHEMA_VERSION = 4
VERSION_KEY = b"dflash.schema_version"

_TS = pa.timestamp("us", tz="UTC")
_IDS = pa.list_(pa.int32())

Str = Annotated[str | None, pa.string()]
Text = Annotated[str | None, pa.large_string()]
Time = Annotated[dt.datetime | None, _TS]
Count = Annotated[int | None, pa.int64()]
Ids = Annotated[list[int] | None, _IDS]


@dataclass
class CallRecord:
    """One row of `DATA_DIR/calls/*.parquet`: what the client sent, what it got back, and the target's ids."""

    call_id: Annotated[str, pa.string()]
    session_id: Str = None  # from the `/s/{id}` prefix (records.ids), None without one
    agent: Str = None  # records.agents.AgentName, or other (from the User-Agent)
    agent_session_id: Str = None  # the agent's own conversation id (headers or body)
    user_agent: Str = None
    tag: Str = None  # X-Dflash-Tag of the caller (e.g. 'translation' calls of the factory)
    # a wire.apis.Api value (anthropic_messages, openai_chat, ...): a str, since records imports nothing
    api: Str = None
    method: Str = None
    path: Str = None  # the upstream path (prefix stripped)
    model: Str = None
    stream: Annotated[bool | None, pa.bool_()] = None
    status_code: Annotated[int | None, pa.int32()] = None
    outcome: Str = None  # ok | rejected | upstream_error | timeout | client_disconnected
    error: Str = None
    request_json: Text = None  # the client's request body as sent
    upstream_request_json: Text = None  # what went upstream when the proxy changed it (translation, ids)
    response_json: Text = None  # the reply in the client's API shape (streams assembled), ids removed
    stream_raw_zstd: Annotated[bytes | None, pa.large_binary()] = None  # raw SSE bytes, zstd
    response_content_encoding: Str = None
    started_at: Time = None
    first_byte_at: Time = None
    finished_at: Time = None
    prompt_tokens: Count = None
    completion_tokens: Count = None
    prompt_token_ids: Ids = None  # the target's exact prompt ids, when the upstream returned them
    completion_token_ids: Ids = None
    token_ids_source: Str = None  # upstream | tokenize
    finish_reason: Str = None
    translated: Annotated[bool | None, pa.bool_()] = None
    dropped_fields: Annotated[list[str] | None, pa.list_(pa.string())] = None
    max_tokens_capped: Count = None  # the completion limit the proxy sent when it lowered the client's
    upstream: Str = None
    proxy_id: Str = None
    # Set only on rows `python -m trainer regenerate` wrote (DATA/regenerated/): the recorded call whose
    # prompt was re-sampled. The prompt, session and agent are that call's; the completion is the engine's.
    regenerated_from: Str = None

    def as_row(self) -> dict[str, Any]:
        """The row for Arrow: the fields as they are (shallow: a prompt's 100k ids are not copied)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _arrow_fields(cls: type) -> list[pa.Field]:
    hints = get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        meta = getattr(hints[f.name], "__metadata__", ())
        arrow = next(m for m in meta if isinstance(m, pa.DataType))
        out.append(pa.field(f.name, arrow))
    return out


SCHEMA = pa.schema(_arrow_fields(CallRecord), metadata={VERSION_KEY: str(SCHEMA_VERSION).encode()})
COLUMNS = tuple(SCHEMA.names)


def schema_version(schema: pa.Schema) -> int:
    """The version a file was written with: its metadata, or 1 for parts that predate versioning."""
    raw = (schema.metadata or {}).get(VERSION_KEY)
    return int(raw) if raw else 1
