"""Parquet shards of one config/split, written as Arrow record batches while rows are built.

Memory is bounded by one batch (`batch_rows` rows or `batch_bytes` of payload, whichever comes first),
not by a shard: a batch becomes a row group of the open shard at once, and a shard is closed when its
file reaches `max_bytes`. Token ids travel as int32 numpy arrays, never as lists of Python ints (a 30k-id
list is about 1 MB of Python objects, the array 120 kB). Shards are renamed to the Hub's
``<split>-xxxxx-of-xxxxx.parquet`` once their number is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# The published files are written once and read many times: zstd level 9 stores 5-7 % less than Arrow's
# default level 1 on agent traffic (token ids and message texts), for ≈ 2x the compression CPU
# (docs/BENCHMARKS.md, "Export"). Every Parquet reader decodes any level.
COMPRESSION = {"compression": "zstd", "compression_level": 9}


class ShardWriter:
    def __init__(
        self,
        folder: Path,
        split: str,
        schema: pa.Schema,
        *,
        max_bytes: int,
        max_rows: int | None = None,
        batch_rows: int = 256,
        batch_bytes: int = 16 << 20,
    ) -> None:
        self.folder, self.split, self.schema = folder, split, schema
        self.max_bytes, self.max_rows = max_bytes, max_rows
        # a batch stays well under a shard, so shards are cut near `max_bytes`
        self.batch_rows, self.batch_bytes = batch_rows, min(batch_bytes, max(1, max_bytes // 8))
        self.buf: list[dict[str, Any]] = []
        self.buf_bytes = 0
        self.parts: list[Path] = []
        self._writer: pq.ParquetWriter | None = None
        self._shard_rows = 0

    def add(self, row: dict[str, Any]) -> None:
        """Add one row; it is written with the batch it completes."""
        if self._writer is None or self._full():
            self._next_shard()
        self.buf.append(row)
        self.buf_bytes += _payload(row)
        self._shard_rows += 1
        if len(self.buf) >= self.batch_rows or self.buf_bytes >= self.batch_bytes:
            self._flush()

    def _full(self) -> bool:
        if self.max_rows is not None and self._shard_rows >= self.max_rows:
            return True
        return (
            bool(self.parts) and self.parts[-1].exists() and self.parts[-1].stat().st_size >= self.max_bytes
        )

    def _next_shard(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f".{self.split}-{len(self.parts):05d}.tmp"
        self._writer = pq.ParquetWriter(path, self.schema, **COMPRESSION)
        self.parts.append(path)
        self._shard_rows = 0

    def _flush(self) -> None:
        if not self.buf or self._writer is None:
            return
        self._writer.write_batch(pa.RecordBatch.from_pylist(self.buf, schema=self.schema))
        self.buf, self.buf_bytes = [], 0

    def close(self) -> list[Path]:
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        n = len(self.parts)
        out = []
        for i, p in enumerate(self.parts):
            final = p.with_name(f"{self.split}-{i:05d}-of-{n:05d}.parquet")
            p.rename(final)
            out.append(final)
        return out


def _payload(row: dict[str, Any]) -> int:
    """Rough uncompressed size of a row: its text and its ids."""
    n = 0
    for v in row.values():
        if isinstance(v, str | bytes):
            n += len(v)
        elif isinstance(v, list) and v and isinstance(v[0], str):
            n += sum(len(x) for x in v)
        elif v is not None and hasattr(v, "__len__"):
            n += 4 * len(v)
    return n
