"""Reading a published `calls` config back whole: each row's prompt ids and request rebuilt from its
trajectory (records/dataset.py), walking a split's `calls` and `trajectories` shards forward together.

The export writes a session's trajectories together and its calls together, sessions in the same order in
both configs, so a reader holds one session's trajectories at a time, whatever the dataset's size."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from records.dataset import join_request

IN_TRAJECTORY = (
    "trajectory_id",
    "prompt_len",
    "request_params",
    "messages_field",
    "messages_prefix",
    "messages_tail",
)


def trajectory_files(calls_file: Path) -> list[Path]:
    """The `trajectories` shards of the split `calls_file` belongs to (`<split>-xxxxx-of-xxxxx.parquet`)."""
    split = calls_file.name.split("-")[0]
    return sorted((calls_file.parent.parent / "trajectories").glob(f"{split}-*.parquet"))


class TrajectoryCursor:
    """A split's trajectories, read forward as its calls ask for them; one session's kept at a time."""

    def __init__(self, files: list[Path]) -> None:
        self._rows = self._read(files)
        self._held: dict[str, tuple[np.ndarray | None, list[str] | None]] = {}
        self._session: str | None = None

    @staticmethod
    def _read(files: list[Path]) -> Iterator[dict[str, Any]]:
        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=16):
                tokens = batch.column("token_ids").to_numpy(zero_copy_only=False)
                plain = batch.select(["trajectory_id", "session_id", "messages"]).to_pylist()
                for row, ids in zip(plain, tokens, strict=True):
                    yield {**row, "token_ids": ids}

    def get(self, trajectory_id: str) -> tuple[np.ndarray | None, list[str] | None]:
        while trajectory_id not in self._held:
            row = next(self._rows, None)
            if row is None:
                raise ValueError(
                    f"trajectory {trajectory_id} is not in this split's trajectories after the ones read: "
                    "read a split's calls in their stored order, beside its trajectories"
                )
            if row["session_id"] != self._session:
                self._held.clear()
                self._session = row["session_id"]
            ids = row["token_ids"]
            self._held[row["trajectory_id"]] = (
                None if ids is None else ids.astype(np.int32),
                row["messages"],
            )
        return self._held[trajectory_id]


def whole(table: pa.Table, cursor: TrajectoryCursor) -> pa.Table:
    """`table` (calls rows in stored order with the `IN_TRAJECTORY` columns) plus `prompt_token_ids` and
    `request_json`, whole."""
    cols = {c: table.column(c).to_pylist() for c in IN_TRAJECTORY}
    ids: list[np.ndarray | None] = []
    texts: list[str | None] = []
    for i in range(table.num_rows):
        tid, n = cols["trajectory_id"][i], cols["prompt_len"][i]
        tokens, messages = cursor.get(tid) if tid is not None else (None, None)
        ids.append(None if n is None or tokens is None else tokens[:n])
        field, prefix = cols["messages_field"][i], cols["messages_prefix"][i]
        mine = None if field is None else (messages or [])[: prefix or 0] + (cols["messages_tail"][i] or [])
        texts.append(join_request(cols["request_params"][i], field, mine))
    table = table.append_column("prompt_token_ids", pa.array(ids, type=pa.list_(pa.int32())))
    return table.append_column("request_json", pa.array(texts, type=pa.large_string()))
