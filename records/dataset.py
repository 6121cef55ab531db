"""The published dataset's configs, and how a call's prompt and request are read out of its trajectory.

Agents resend the whole conversation with every call, so storing each call's prompt ids and request whole
grows quadratically over a session. The dataset stores each session as **trajectories** instead: a
trajectory is a chain of calls whose prompt ids each extend the previous call's, and its row holds the last
call's prompt + completion ids (`token_ids`) and its request's message list (`messages`, one JSON text per
message). A `calls` row holds offsets into its trajectory and what is its own:

- prompt ids  = `trajectories.token_ids[:calls.prompt_len]`
- messages    = `trajectories.messages[:calls.messages_prefix] + calls.messages_tail`
- request     = `calls.request_params` (the body without its message list) with the messages under
  `calls.messages_field` (`messages`, or `input` for the Responses API); when `messages_field` is null
  the request had no message list and `request_params` is the whole body.

A call whose prompt is not an extension of any earlier call's starts a trajectory of its own, so every slice
is exact. Only plain columns: any Parquet reader rebuilds a call with one join and a slice (the card shows
it, and tests/factory/test_dataset_plain.py does it with pandas alone). `sequences`, the training-ready
config, is records/sequences.py's. docs/dataset.md describes every column (`COLUMN_DOCS`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from records.schema import SCHEMA, SCHEMA_VERSION, VERSION_KEY

_TS = pa.timestamp("us", tz="UTC")
_META = {VERSION_KEY: str(SCHEMA_VERSION).encode()}
_IDS = pa.list_(pa.int32())
_TEXTS = pa.list_(pa.large_string())
# The request fields that hold a conversation, in the order they are looked for.
MESSAGE_FIELDS = ("messages", "input")

# The chat view (wire/chat_view.py): the conversation as the target saw it, in OpenAI Chat form, typed.
_STR = pa.large_string()
TOOL_CALL = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", _STR)])),
    ]
)
CHAT_MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", _STR),
        ("reasoning_content", _STR),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
    ]
)
CHAT_TOOL = pa.struct(
    [
        ("type", pa.string()),
        # `strict` is kept: a template writes the whole function object (`tojson`), so a dropped field
        # would change the prompt
        (
            "function",
            pa.struct(
                [("name", pa.string()), ("description", _STR), ("parameters", _STR), ("strict", pa.bool_())]
            ),
        ),
    ]
)
CHAT_MESSAGES, CHAT_TOOLS = pa.list_(CHAT_MESSAGE), pa.list_(CHAT_TOOL)


def _call(name: str) -> pa.Field:
    return SCHEMA.field(name)


_SESSION_OF_CALL = [
    pa.field("repo", pa.string()),
    pa.field("repo_language", pa.string()),
    pa.field("repo_license", pa.string()),
    pa.field("issue_number", pa.int64()),
    pa.field("issue_url", pa.string()),
    pa.field("base_commit", pa.string()),
    pa.field("lang", pa.string()),
    pa.field("session_outcome", pa.string()),
]
_PER_CALL = [
    pa.field("turn_index", pa.int32()),
    pa.field("client_agent", pa.string()),
    pa.field("user_agent_product", pa.string()),
    pa.field("agent_version", pa.string()),
    pa.field("target_model", pa.string()),
    pa.field("first_byte_latency_ms", pa.float64()),
    pa.field("ids_exact", pa.bool_()),
    pa.field("ids_redacted", pa.bool_()),
]
_CALL_COLUMNS = (
    "agent_session_id",
    "api",
    "model",
    "stream",
    "status_code",
    "outcome",
    "error",
    "finish_reason",
    "response_json",
    "prompt_tokens",
    "completion_tokens",
)
_IN_TRAJECTORY = [
    pa.field("trajectory_id", pa.string()),
    pa.field("prompt_len", pa.int32()),
    _call("completion_token_ids"),
    pa.field("completion_in_trajectory", pa.bool_()),
    _call("token_ids_source"),
    pa.field("request_params", pa.large_string()),
    pa.field("messages_field", pa.string()),
    pa.field("messages_prefix", pa.int32()),
    pa.field("messages_tail", _TEXTS),
    pa.field("chat_prefix", pa.int32()),
    pa.field("chat_tail", CHAT_MESSAGES),
    pa.field("chat_reply", CHAT_MESSAGE),
    pa.field("tools", CHAT_TOOLS),
    pa.field("chat_template_kwargs", pa.string()),
]

DATASET_CALLS_SCHEMA = pa.schema(
    [
        _call("call_id"),
        _call("session_id"),
        *_SESSION_OF_CALL,
        _call("agent"),
        *_PER_CALL,
        *(_call(c) for c in _CALL_COLUMNS),
        *_IN_TRAJECTORY,
        _call("started_at"),
        _call("first_byte_at"),
        _call("finished_at"),
    ],
    metadata=_META,
)

TRAJECTORIES_SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("session_id", pa.string()),
        ("repo", pa.string()),
        ("lang", pa.string()),
        ("agent", pa.string()),
        ("api", pa.string()),
        ("n_calls", pa.int32()),
        ("call_ids", pa.list_(pa.string())),
        ("token_ids", _IDS),
        ("messages", _TEXTS),
        ("chat_messages", CHAT_MESSAGES),
        ("tools", CHAT_TOOLS),
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
        ("agent_version", pa.string()),  # from the User-Agent of its calls
        ("target_model", pa.string()),
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
        ("n_calls_exact_ids", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        # The repository's tests before the agent and after its patch (null: no test command ran).
        ("test_command", pa.string()),
        ("baseline_passed", pa.int32()),
        ("baseline_failed", pa.int32()),
        ("baseline_errors", pa.int32()),
        ("baseline_timed_out", pa.bool_()),
        ("baseline_exit_code", pa.int32()),  # what says the outcome of a runner that prints no counts
        ("baseline_tail", pa.large_string()),
        ("after_passed", pa.int32()),
        ("after_failed", pa.int32()),
        ("after_errors", pa.int32()),
        ("after_timed_out", pa.bool_()),
        ("after_exit_code", pa.int32()),
        ("after_tail", pa.large_string()),
        ("resolved", pa.bool_()),  # the patch newly made failing tests pass and broke none
        ("setup_status", pa.string()),  # built | cached | failed (the environment image's setup)
        # What fixed the issue upstream (null: not known): pull_request | commit, its URL and number, the
        # merge commit and the files it changed.
        ("fix_kind", pa.string()),
        ("fix_url", pa.string()),
        ("fix_pull_request", pa.int64()),
        ("fix_merge_commit", pa.string()),
        ("fix_files", pa.list_(pa.string())),
    ],
    metadata={VERSION_KEY: str(SCHEMA_VERSION).encode()},
)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def common_prefix_str(a: str, b: str) -> int:
    """Length of the common prefix (binary search over slice comparisons, which run in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix_str(a: str, b: str, limit: int) -> int:
    lo, hi = 0, min(len(a), len(b), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def split_request(text: str | None) -> tuple[str | None, str | None, list[str] | None]:
    """(request without its message list, the field that held it, one JSON text per message); a body with
    no message list (not JSON, or no list under `MESSAGE_FIELDS`) comes back whole with (None, None)."""
    if text is None:
        return None, None, None
    try:
        body = json.loads(text)
    except ValueError:
        return text, None, None
    if isinstance(body, dict):
        for field in MESSAGE_FIELDS:
            if isinstance(body.get(field), list):
                messages = [_compact(m) for m in body.pop(field)]
                return _compact(body), field, messages
    return text, None, None


def join_request(params: str | None, field: str | None, messages: list[str] | None) -> str | None:
    """The request body back from `split_request`'s parts (equal as JSON; the message list comes last)."""
    if field is None or params is None:
        return params
    body = json.loads(params)
    body[field] = [json.loads(m) for m in messages or []]
    return _compact(body)
