"""One Parquet part of call records, written batch by batch so rolling a segment needs memory for one batch,
not for the segment: the same atomic steps as records.io.write_part (a hidden temp file, fsync, rename, fsync
the folder; readers never see a half-written part), with one row group per batch. The temp file is held under
an exclusive flock while it is written, so `remove_stale` (run by every roll) only removes the temp files of
writers that died."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import pyarrow.parquet as pq
import zstandard

import records
from proxy.parquet import table
from proxy.record import Call
from records.atomic import fsync_path


class PartWriter:
    def __init__(self, directory: Path, name: str) -> None:
        self.final = directory / name
        self._tmp = directory / f".{name}.{os.getpid()}.tmp"
        self._writer: pq.ParquetWriter | None = None
        self._file: BinaryIO | None = None
        self._compressor = zstandard.ZstdCompressor(level=3)
        self.rows = 0

    def write(self, calls: list[Call]) -> None:
        if not calls:
            return
        if self._writer is None:
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self._file = self._tmp.open("wb")
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
            self._writer = pq.ParquetWriter(self._file, records.SCHEMA, compression="zstd")
        self._writer.write_table(table(calls, self._compressor))
        self.rows += len(calls)

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._writer is None or self._file is None:
            return
        try:
            self._writer.close()
            if kind is None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._tmp.replace(self.final)
                fsync_path(self.final.parent)
        finally:
            if kind is not None:
                self._tmp.unlink(missing_ok=True)
            self._file.close()  # releases the lock


def write_part(calls: list[Call], calls_dir: Path, name: str) -> Path:
    """Write calls as `calls_dir/name` in one go."""
    with PartWriter(calls_dir, name) as part:
        part.write(calls)
    return part.final


def remove_stale(calls_dir: Path) -> None:
    """Remove temp parts left by rollers killed mid-write (their segments are still in the spool)."""
    for stale in calls_dir.glob(".part-*.tmp") if calls_dir.exists() else []:
        try:
            with stale.open("rb") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                stale.unlink(missing_ok=True)
        except (BlockingIOError, FileNotFoundError):
            continue  # a live roller is writing it, or it just finished
