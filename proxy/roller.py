"""Roll closed spool segments into Parquet parts; trim a segment only once its part is durable.

The part's name derives from the segment's, so a roll interrupted after the rename but before the unlink is
finished by the next roll without writing the calls twice. A damaged frame (torn by a crash mid-write, or
corrupted on disk) is skipped and the roll carries on with the next good one: a frame is only acknowledged
after its fsync, so a torn one was never acknowledged to a client.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from proxy import frames
from proxy.part import PartWriter, remove_stale
from proxy.record import Call, from_frame
from proxy.spool import SEGMENT_SUFFIX

log = logging.getLogger(__name__)
# Responses up to this size are read into memory when a segment rolls; larger ones are streamed from it.
INLINE_MAX = 256 << 10
# A segment is rolled this many bytes of calls at a time (one row group each), so the roller's memory does
# not grow with the segment.
BATCH_BYTES = 16 << 20


def part_name(segment: Path) -> str:
    return f"part-{segment.name.removesuffix(SEGMENT_SUFFIX)}.parquet"


Prepare = Callable[[list[Call]], None]


def roll_segment(segment: Path, calls_dir: Path, prepare: Prepare | None = None) -> int | None:
    """Roll one segment. Returns the number of calls written, or None if it is live or already gone."""
    try:
        fd = os.open(segment, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb", buffering=0) as f:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # a live proxy still appends to it
        try:
            if segment.stat().st_ino != os.fstat(fd).st_ino:
                return None
        except FileNotFoundError:
            return None  # another roller finished it while we waited
        with PartWriter(calls_dir, part_name(segment)) as part:
            done = part.final.exists()  # an earlier roll wrote the part but was stopped before the unlink
            n = 0
            for batch in _batches(read_segment(segment, f)):
                n += len(batch)
                if not done:
                    if prepare is not None:
                        prepare(batch)
                    part.write(batch)
        segment.unlink()
        return n


def _batches(calls: Iterable[Call]) -> Iterator[list[Call]]:
    """Calls in groups of about BATCH_BYTES: a segment is rolled one group (one row group) at a time."""
    batch: list[Call] = []
    size = 0
    for call in calls:
        batch.append(call)
        size += len(call.request_body) + len(call.upstream_request_body or b"") + call.response_size
        if size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def read_segment(segment: Path, f: BinaryIO) -> Iterator[Call]:
    """The good frames of an open segment as calls (responses over INLINE_MAX left in the file), damage logged."""
    size = os.fstat(f.fileno()).st_size
    good = 0
    for item in frames.scan(f, size, INLINE_MAX):
        if isinstance(item, frames.Frame):
            try:
                call = from_frame(item, f)
            except (ValueError, TypeError) as exc:  # a frame from an incompatible writer
                log.warning("%s: frame at %d cannot be read (%s); skipped", segment.name, item.offset, exc)
                continue
            good += 1
            yield call
        elif item.end == size and not good:
            log.warning("%s: no readable frame in %d bytes; skipped", segment.name, size)
        else:
            kind = "torn trailing" if item.end == size else "damaged"
            log.warning(
                "%s: skipping %d %s bytes at offset %d",
                segment.name,
                item.end - item.offset,
                kind,
                item.offset,
            )


def roll_all(spool_dir: Path, calls_dir: Path, prepare: Prepare | None = None) -> tuple[int, int]:
    """Roll every segment no live process holds. Returns (segments rolled, calls written)."""
    segments = rolled = 0
    if not spool_dir.exists():
        return 0, 0
    for seg in sorted(spool_dir.glob(f"*{SEGMENT_SUFFIX}")):
        n = roll_segment(seg, calls_dir, prepare)
        if n is not None:
            segments += 1
            rolled += n
    remove_stale(calls_dir)
    return segments, rolled


def roll_data_dir(data_dir: Path) -> str:
    """`proxy roll`: every segment of DATA_DIR/spool no live proxy holds, rolled into DATA_DIR/calls; the
    one line that says so (the factory calls this for the spool a dead run's proxy left)."""
    segments, calls = roll_all(data_dir / "spool", data_dir / "calls")
    return f"rolled {calls} calls from {segments} segments into {data_dir / 'calls'}"
