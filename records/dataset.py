"""The published dataset's two configs, `calls` and `sessions`, and the delta storage of a session's calls.

Column names follow the call record where they overlap; the session's language is `lang` (older trainer
samples called it `language`; `records.io.conform` renames it).

Agents resend the whole conversation on every call, so a session's prompt ids and request bodies grow
quadratically when stored whole. A `calls` row is stored against an earlier row of its session
(`delta_ref`, that row's `call_id`; null: stored whole):

- prompt ids: the leading `prompt_ids_prefix_len` ids of the reference's, then `prompt_ids_suffix`;
- request body: the reference's first `request_prefix_chars` characters, then `request_json_delta`, then
  its last `request_suffix_chars` characters (an agent appends messages in the middle of its JSON, before
  `system`/`tools`; characters are Unicode code points).

A reference reaches back at most `DELTA_WINDOW` rows and never across a shard, so a reader walking a shard
(or a split's shards) in stored order keeps only the last `DELTA_WINDOW` rows: `CallDeltaDecoder`.
`records.io.read_batches` gives `prompt_token_ids` and `request_json` back whole."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pyarrow as pa

from records.schema import SCHEMA, SCHEMA_VERSION, VERSION_KEY

_TS = pa.timestamp("us", tz="UTC")
# Rows a reference may reach back (within one shard). It must exceed the sessions a proxy interleaves in its
# parts: measured at 128 in flight, a window of 64 stored 0.53x of plain Parquet, 1024 stored 0.067x
# (docs/BENCHMARKS.md); the writer and the reader each hold this many rows.
DELTA_WINDOW = 1024
DELTA_WINDOW_KEY = b"dflash.delta_window"
_META = {VERSION_KEY: str(SCHEMA_VERSION).encode(), DELTA_WINDOW_KEY: str(DELTA_WINDOW).encode()}
DELTA_COLUMNS = (
    "delta_ref", "prompt_ids_prefix_len", "prompt_ids_suffix",
    "request_prefix_chars", "request_suffix_chars", "request_json_delta",
)  # fmt: skip


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
    pa.field("session_outcome", pa.string()),  # succeeded | agent_failed | infra_failed
]
_PER_CALL = [
    pa.field("turn_index", pa.int32()),  # 0-based position of the call in its session (stored order)
    pa.field("client_agent", pa.string()),  # the agent as the proxy identified it from headers
    pa.field("agent_name", pa.string()),  # from User-Agent: claude-cli, codex_exec, opencode, …
    pa.field("agent_version", pa.string()),
    pa.field("target_model", pa.string()),  # the model that answered (the target's served name)
    pa.field("first_byte_latency_ms", pa.float64()),
    pa.field("ids_exact", pa.bool_()),  # ids the target returned with its reply (not rendered later)
    pa.field("ids_redacted", pa.bool_()),  # a secret inside the ids was re-tokenized as its placeholder
]
_CALL_COLUMNS = (
    "agent_session_id", "api", "model", "stream", "status_code", "outcome", "error", "finish_reason",
    "response_json", "prompt_tokens", "completion_tokens",
)  # fmt: skip
_DELTA = [
    pa.field("delta_ref", pa.string()),
    pa.field("prompt_ids_prefix_len", pa.int32()),
    pa.field("prompt_ids_suffix", pa.list_(pa.int32())),
    pa.field("request_prefix_chars", pa.int32()),
    pa.field("request_suffix_chars", pa.int32()),
    pa.field("request_json_delta", pa.large_string()),
]

DATASET_CALLS_SCHEMA = pa.schema(
    [
        _call("call_id"),
        _call("session_id"),
        *_SESSION_OF_CALL,
        _call("agent"),
        *_PER_CALL,
        *(_call(c) for c in _CALL_COLUMNS),
        *_DELTA,
        _call("completion_token_ids"),
        _call("token_ids_source"),
        _call("started_at"),
        _call("first_byte_at"),
        _call("finished_at"),
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


class _Window:
    """The last `window` rows (ids and request text) by call id, in stored order."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.rows: OrderedDict[str, tuple[str, np.ndarray | None, str | None]] = OrderedDict()

    def push(self, call_id: str, session: str, ids: np.ndarray | None, text: str | None) -> None:
        self.rows[call_id] = (session, ids, text)
        if len(self.rows) > self.window:
            self.rows.popitem(last=False)


class CallDeltaEncoder:
    """Writer side: each row against the earlier row of its session, among the last `window` rows, whose
    prompt ids share the longest prefix (the latest one when there are no ids). `reset()` at a new shard."""

    def __init__(self, window: int = DELTA_WINDOW, candidates: int = 8) -> None:
        self.window, self.candidates = window, candidates
        self.reset()

    def reset(self) -> None:
        self._w = _Window(self.window)

    def encode(self, call_id: str, session: str, ids: np.ndarray | None, text: str | None) -> dict[str, Any]:
        mine = [(c, r) for c, r in reversed(self._w.rows.items()) if r[0] == session][: self.candidates]
        ref, base_ids, base_text, best = None, None, None, -1
        for c, (_, b_ids, b_text) in mine:
            n = common_prefix(b_ids, ids) if b_ids is not None and ids is not None else 0
            if n > best:
                ref, base_ids, base_text, best = c, b_ids, b_text, n
        self._w.push(call_id, session, ids, text)
        out: dict[str, Any] = {"delta_ref": ref, "prompt_ids_suffix": ids, "request_json_delta": text}
        out.update(prompt_ids_prefix_len=None, request_prefix_chars=None, request_suffix_chars=None)
        if ref is None:
            return out
        if ids is not None and base_ids is not None:
            n = common_prefix(base_ids, ids)
            out.update(prompt_ids_prefix_len=n, prompt_ids_suffix=ids[n:])
        if text is not None and base_text is not None:
            p = common_prefix_str(base_text, text)
            q = common_suffix_str(base_text, text, min(len(base_text), len(text)) - p)
            out.update(
                request_prefix_chars=p, request_suffix_chars=q, request_json_delta=text[p : len(text) - q]
            )
        return out


class CallDeltaDecoder:
    """Reader side: whole prompt ids and request text of rows given in stored order (a shard, or a split's
    shards in order)."""

    def __init__(self, window: int = DELTA_WINDOW) -> None:
        self._w = _Window(window)

    def decode(self, row: dict[str, Any]) -> tuple[np.ndarray | None, str | None]:
        ref, suffix, delta = row.get("delta_ref"), row.get("prompt_ids_suffix"), row.get("request_json_delta")
        ids = None if suffix is None else np.asarray(suffix, dtype=np.int32)
        text = delta
        if ref is not None:
            base = self._w.rows.get(ref)
            if base is None:
                raise ValueError(
                    f"call {row['call_id']}: stored against {ref}, which is not among the last "
                    f"{self._w.window} rows read: read the calls of a shard in their stored order"
                )
            _, b_ids, b_text = base
            if ids is not None and row.get("prompt_ids_prefix_len") is not None and b_ids is not None:
                ids = np.concatenate([b_ids[: int(row["prompt_ids_prefix_len"])], ids])
            if delta is not None and row.get("request_prefix_chars") is not None and b_text is not None:
                p, q = int(row["request_prefix_chars"]), int(row["request_suffix_chars"] or 0)
                text = b_text[:p] + delta + b_text[len(b_text) - q :]
        self._w.push(row["call_id"], "", ids, text)
        return ids, text


def expand(table: pa.Table, decoder: CallDeltaDecoder) -> pa.Table:
    """`table` (rows in stored order, with `call_id` and the delta columns) plus `prompt_token_ids` and
    `request_json`, whole."""
    cols = {c: table.column(c) for c in ("call_id", *DELTA_COLUMNS)}
    ids, texts = [], []
    suffixes = cols["prompt_ids_suffix"].to_numpy(zero_copy_only=False)
    plain = {c: v.to_pylist() for c, v in cols.items() if c != "prompt_ids_suffix"}
    for i in range(table.num_rows):
        row = {c: v[i] for c, v in plain.items()}
        row["prompt_ids_suffix"] = suffixes[i]
        a, b = decoder.decode(row)
        ids.append(a)
        texts.append(b)
    table = table.append_column("prompt_token_ids", pa.array(ids, type=pa.list_(pa.int32())))
    return table.append_column("request_json", pa.array(texts, type=pa.large_string()))


def window_of(schema: pa.Schema) -> int:
    raw = (schema.metadata or {}).get(DELTA_WINDOW_KEY)
    return int(raw) if raw else DELTA_WINDOW
