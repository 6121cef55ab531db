"""The published dataset's two configs, `calls` and `sessions`, and the prefix-aware storage of prompt ids.

Column names follow the call record where they overlap; the session's language is `lang` (older trainer
samples called it `language`; `records.io.conform` renames it).

Agents resend the whole conversation on every call, so a session's prompt ids grow quadratically when
stored whole. A `calls` row stores them as a reference to an earlier row of the same session
(`prompt_ids_ref`, its `call_id`), how many leading ids it shares with it (`prompt_ids_prefix_len`) and
the rest (`prompt_ids_suffix`); a row without a reference holds all its ids in the suffix. A reference
reaches back at most `PREFIX_WINDOW` rows and never across a shard, so a reader that walks a shard (or a
whole split) in stored order keeps only the last `PREFIX_WINDOW` rows' ids: `PromptIdsDecoder`.
`records.io.read_batches` gives the full `prompt_token_ids` back."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from typing import Any

import numpy as np
import pyarrow as pa

from records.schema import SCHEMA, SCHEMA_VERSION, VERSION_KEY

_TS = pa.timestamp("us", tz="UTC")
PREFIX_WINDOW = 64  # rows a reference may reach back (within one shard)
PREFIX_WINDOW_KEY = b"dflash.prefix_window"
_META = {VERSION_KEY: str(SCHEMA_VERSION).encode(), PREFIX_WINDOW_KEY: str(PREFIX_WINDOW).encode()}
PREFIX_COLUMNS = ("prompt_ids_ref", "prompt_ids_prefix_len", "prompt_ids_suffix")


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
    "request_json", "response_json", "prompt_tokens", "completion_tokens",
)  # fmt: skip
_PROMPT_IDS = [
    pa.field("prompt_ids_ref", pa.string()),
    pa.field("prompt_ids_prefix_len", pa.int32()),
    pa.field("prompt_ids_suffix", pa.list_(pa.int32())),
]

DATASET_CALLS_SCHEMA = pa.schema(
    [
        _call("call_id"),
        _call("session_id"),
        *_SESSION_OF_CALL,
        _call("agent"),
        *_PER_CALL,
        *(_call(c) for c in _CALL_COLUMNS),
        *_PROMPT_IDS,
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
    ],
    metadata={VERSION_KEY: str(SCHEMA_VERSION).encode()},
)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class PromptIdsEncoder:
    """Writer side: each row's prompt ids as (ref, prefix_len, suffix) against the earlier row of its
    session, among the last `window` rows, that shares the longest prefix. `reset()` at a new shard."""

    def __init__(self, window: int = PREFIX_WINDOW, min_prefix: int = 16, candidates: int = 8) -> None:
        self.window, self.min_prefix, self.candidates = window, min_prefix, candidates
        self.reset()

    def reset(self) -> None:
        self._rows: deque[tuple[str, str]] = deque()  # (call_id, session) in stored order
        self._ids: dict[str, np.ndarray] = {}
        self._by_session: dict[str, list[str]] = defaultdict(list)

    def encode(
        self, call_id: str, session: str, ids: np.ndarray | None
    ) -> tuple[str | None, int | None, np.ndarray | None]:
        if ids is None:
            return None, None, None
        best, best_len = None, 0
        for ref in self._by_session.get(session, [])[-self.candidates :]:
            n = common_prefix(self._ids[ref], ids)
            if n > best_len:
                best, best_len = ref, n
        self._push(call_id, session, ids)
        if best is None or best_len < self.min_prefix:
            return None, None, ids
        return best, best_len, ids[best_len:]

    def _push(self, call_id: str, session: str, ids: np.ndarray) -> None:
        self._rows.append((call_id, session))
        self._ids[call_id] = ids
        self._by_session[session].append(call_id)
        if len(self._rows) > self.window:
            old, old_session = self._rows.popleft()
            del self._ids[old]
            self._by_session[old_session].remove(old)
            if not self._by_session[old_session]:
                del self._by_session[old_session]


class PromptIdsDecoder:
    """Reader side: full prompt ids of rows given in stored order (a shard, or a split's shards in order)."""

    def __init__(self, window: int = PREFIX_WINDOW) -> None:
        self.window = window
        self._ids: OrderedDict[str, np.ndarray] = OrderedDict()

    def decode(self, call_id: str, ref: str | None, prefix_len: int | None, suffix: Any) -> np.ndarray | None:
        if suffix is None:
            return None
        tail = np.asarray(suffix, dtype=np.int32)
        if ref is None:
            full = tail
        else:
            base = self._ids.get(ref)
            if base is None:
                raise ValueError(
                    f"call {call_id}: its prompt ids refer to {ref}, not among the last {self.window} rows "
                    "read: read the calls of a shard in their stored order"
                )
            full = np.concatenate([base[: int(prefix_len or 0)], tail])
        self._ids[call_id] = full
        if len(self._ids) > self.window:
            self._ids.popitem(last=False)
        return full


def expand_prompt_ids(table: pa.Table, decoder: PromptIdsDecoder) -> pa.Table:
    """`table` (rows in stored order, with `call_id` and the prefix columns) plus `prompt_token_ids`."""
    ids = [
        decoder.decode(c, r, n, s)
        for c, r, n, s in zip(
            table.column("call_id").to_pylist(),
            table.column("prompt_ids_ref").to_pylist(),
            table.column("prompt_ids_prefix_len").to_pylist(),
            table.column("prompt_ids_suffix").to_numpy(zero_copy_only=False),
            strict=True,
        )
    ]
    col = pa.array(ids, type=pa.list_(pa.int32()))
    return table.append_column("prompt_token_ids", col)


def window_of(schema: pa.Schema) -> int:
    raw = (schema.metadata or {}).get(PREFIX_WINDOW_KEY)
    return int(raw) if raw else PREFIX_WINDOW
