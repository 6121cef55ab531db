"""The published dataset's two configs: `calls` (a call record joined with its session) and `sessions`.

Column names follow the call record where they overlap; the session's language is `lang` (older trainer
samples called it `language`; `records.io.conform` renames it)."""

from __future__ import annotations

import pyarrow as pa

from records.schema import SCHEMA, SCHEMA_VERSION, VERSION_KEY

_TS = pa.timestamp("us", tz="UTC")
_META = {VERSION_KEY: str(SCHEMA_VERSION).encode()}


def _call(name: str) -> pa.Field:
    return SCHEMA.field(name)


# Session columns that every exported call carries, then the call record's own columns.
_SESSION_OF_CALL = [
    pa.field("repo", pa.string()),
    pa.field("repo_language", pa.string()),
    pa.field("repo_license", pa.string()),
    pa.field("issue_number", pa.int64()),
    pa.field("lang", pa.string()),
    pa.field("client_agent", pa.string()),  # the agent as the proxy identified it from headers
]
_CALL_COLUMNS = (
    "agent_session_id", "api", "model", "stream", "status_code", "outcome", "error", "finish_reason",
    "request_json", "response_json", "prompt_tokens", "completion_tokens", "prompt_token_ids",
    "completion_token_ids", "token_ids_source", "started_at", "finished_at",
)  # fmt: skip

DATASET_CALLS_SCHEMA = pa.schema(
    [
        _call("call_id"),
        _call("session_id"),
        *_SESSION_OF_CALL[:5],
        _call("agent"),
        _SESSION_OF_CALL[5],
        *(_call(c) for c in _CALL_COLUMNS),
    ],
    metadata=_META,
)

SESSIONS_SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("repo", pa.string()),
        ("repo_language", pa.string()),
        ("repo_license", pa.string()),
        ("issue_number", pa.int64()),
        ("issue_url", pa.string()),
        ("base_commit", pa.string()),
        ("lang", pa.string()),
        ("agent", pa.string()),
        ("task", pa.large_string()),
        ("outcome", pa.string()),  # succeeded | agent_failed | infra_failed
        ("exit_status", pa.int32()),
        ("error", pa.string()),
        ("agent_session_id", pa.string()),
        ("attempts", pa.int32()),
        ("duration_s", pa.float64()),
        ("started_at", _TS),
        ("finished_at", _TS),
        ("patch", pa.large_string()),
        ("n_calls", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
    ],
    metadata=_META,
)
