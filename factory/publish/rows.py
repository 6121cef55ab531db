"""From the proxy's Parquet parts to `calls` rows: reading in small batches with token ids as numpy arrays,
and the per-row fields a user of the dataset needs (agent and version, latency, turn, session facts)."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from records import DATASET_CALLS_SCHEMA
from records.schema import COLUMNS as RECORD_COLUMNS

IDS_COLUMNS = ("prompt_token_ids", "completion_token_ids")
# What the export reads from the proxy's parts.
PROXY_COLUMNS = [
    c
    for c in (
        *DATASET_CALLS_SCHEMA.names,
        "prompt_token_ids",
        "request_json",
        "upstream_request_json",
        "translated",
        "user_agent",
        "tag",
    )
    if c in RECORD_COLUMNS
]
_PRODUCT = re.compile(r"^\s*([A-Za-z][\w.-]*)/(\d[\w.+-]*)")


def agent_of(user_agent: str | None) -> tuple[str | None, str | None]:
    """`claude-cli/2.1.332 (external, sdk-cli)` → ('claude-cli', '2.1.332'); the first product token."""
    m = _PRODUCT.match(user_agent or "")
    return (m.group(1), m.group(2)) if m else (None, None)


def part_files(calls_dir: Path) -> list[Path]:
    """The proxy's finished parts in a stable order (hidden and `_` names are half-written or private)."""
    if not calls_dir.is_dir():
        return []
    return sorted(
        p
        for p in calls_dir.rglob("*.parquet")
        if not any(part.startswith((".", "_")) for part in p.relative_to(calls_dir).parts)
    )


def calls_per_session(files: list[Path]) -> Counter[str]:
    """Calls per proxy session id, translation calls left out (one small column read)."""
    out: Counter[str] = Counter()
    if not files:
        return out
    ds = pads.dataset([str(p) for p in files], format="parquet")
    cols = [c for c in ("session_id", "tag") if c in ds.schema.names]
    for batch in ds.to_batches(columns=cols, batch_size=65_536):
        tags = batch.column("tag").to_pylist() if "tag" in cols else [None] * batch.num_rows
        for sid, tag in zip(batch.column("session_id").to_pylist(), tags, strict=True):
            if sid and tag != "translation":
                out[sid] += 1
    return out


def _ids(column: pa.Array) -> list[np.ndarray | None]:
    """A list<int32> column as one int32 array per row (copied out of the batch), None where null."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    offsets = column.offsets.to_numpy()
    values = column.values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return [values[offsets[i] : offsets[i + 1]].copy() if valid[i] else None for i in range(len(column))]


def read_calls(files: list[Path], batch_rows: int) -> Iterator[dict[str, Any]]:
    """Every call of the parts as a dict; ids as numpy arrays. One file at a time, without read-ahead:
    memory holds one row group of one part (a dataset scan would decode several parts at once)."""
    for f in files:
        pf = pq.ParquetFile(f, buffer_size=1 << 20, pre_buffer=False)
        cols = [c for c in PROXY_COLUMNS if c in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=batch_rows, columns=cols, use_threads=False):
            plain = {c: batch.column(c).to_pylist() for c in cols if c not in IDS_COLUMNS}
            ids = {c: _ids(batch.column(c)) for c in IDS_COLUMNS if c in cols}
            for i in range(batch.num_rows):
                row = {c: v[i] for c, v in plain.items()}
                row.update({c: v[i] for c, v in ids.items()})
                yield row


def dedup_key(call: dict[str, Any]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for k in ("api", "model", "request_json", "response_json"):
        h.update(str(call.get(k) or "").encode())
        h.update(b"\0")
    return h.digest()


def latency_ms(call: dict[str, Any]) -> float | None:
    start, first = call.get("started_at"), call.get("first_byte_at")
    if start is None or first is None:
        return None
    return round((first - start).total_seconds() * 1000, 3)


def call_row(
    call: dict[str, Any], sess: dict[str, Any], turn: int, target_model: str | None
) -> dict[str, Any]:
    """The `calls` row of one proxy call joined with its session (ids still whole, text not yet scrubbed)."""
    row = {k: call.get(k) for k in DATASET_CALLS_SCHEMA.names if k in call}
    name, version = agent_of(call.get("user_agent"))
    source = call.get("token_ids_source")
    has_ids = call.get("prompt_token_ids") is not None or call.get("completion_token_ids") is not None
    row.update(
        prompt_token_ids=call.get("prompt_token_ids"),  # both split over trajectories (trajectories.py)
        request_json=call.get("request_json"),
        upstream_request_json=call.get("upstream_request_json"),  # both read into the chat view
        translated=call.get("translated"),
        session_id=sess["session_id"],
        repo=sess["repo"],
        repo_language=sess["repo_language"],
        repo_license=sess["repo_license"],
        issue_number=sess["issue_number"],
        issue_url=sess["issue_url"],
        base_commit=sess["base_commit"],
        lang=sess["lang"],
        session_outcome=sess["outcome"],
        agent=sess["agent"],
        turn_index=turn,
        client_agent=call.get("agent"),
        user_agent_product=name,
        agent_version=version,
        target_model=target_model or call.get("model"),
        first_byte_latency_ms=latency_ms(call),
        ids_exact=(source == "upstream") if has_ids else None,
        ids_redacted=False if has_ids else None,
    )
    return row
