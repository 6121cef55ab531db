"""Reading the published dataset's previous layout (until 2026-12), where each `calls` row was stored as a
delta against an earlier row of its session; the current layout is records/dataset.py.

A row named its reference (`delta_ref`, a `call_id`; null: stored whole):

- prompt ids: the leading `prompt_ids_prefix_len` ids of the reference's, then `prompt_ids_suffix`;
- request body: the reference's first `request_prefix_chars` characters, then `request_json_delta`, then
  its last `request_suffix_chars` characters (characters are Unicode code points).

A reference reached back at most the file's `dflash.delta_window` rows and never across a shard, so a reader
walking a shard in stored order keeps only that many rows (`CallDeltaDecoder`). `records.io.read_batches`
gives `prompt_token_ids` and `request_json` back whole for either layout; tests/fixtures/dataset_delta
is an export in this layout."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pyarrow as pa

DELTA_WINDOW = 1024  # what the writer used unless the file says otherwise
DELTA_WINDOW_KEY = b"dflash.delta_window"
DELTA_COLUMNS = (
    "delta_ref",
    "prompt_ids_prefix_len",
    "prompt_ids_suffix",
    "request_prefix_chars",
    "request_suffix_chars",
    "request_json_delta",
)


class _Window:
    """The last `window` rows (ids and request text) by call id, in stored order."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.rows: OrderedDict[str, tuple[str, np.ndarray | None, str | None]] = OrderedDict()

    def push(self, call_id: str, session: str, ids: np.ndarray | None, text: str | None) -> None:
        self.rows[call_id] = (session, ids, text)
        if len(self.rows) > self.window:
            self.rows.popitem(last=False)


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
