"""Roll closed spool segments into Parquet parts; trim a segment only once its part is durable.

The part's name derives from the segment's, so a roll interrupted after the rename but before the
unlink is finished by the next roll without writing the calls twice.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable
from pathlib import Path

from proxy.parquet import write_part
from proxy.record import Call, decode_stream
from proxy.spool import SEGMENT_SUFFIX

log = logging.getLogger(__name__)


def part_name(segment: Path) -> str:
    return f"part-{segment.name.removesuffix(SEGMENT_SUFFIX)}.parquet"


Prepare = Callable[[list[Call]], None]


def roll_segment(segment: Path, calls_dir: Path, prepare: Prepare | None = None) -> int | None:
    """Roll one segment. Returns the number of calls written, or None if it is live or already gone."""
    try:
        fd = os.open(segment, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # a live proxy still appends to it
        try:
            if segment.stat().st_ino != os.fstat(fd).st_ino:
                return None
        except FileNotFoundError:
            return None  # another roller finished it while we waited
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
        calls, used = decode_stream(data)
        if used < len(data):
            # A torn tail is a write that was never fsync'd, so never acknowledged to a client.
            log.warning("%s: ignoring %d torn trailing bytes", segment.name, len(data) - used)
        final = calls_dir / part_name(segment)
        if calls and not final.exists():
            if prepare is not None:
                prepare(calls)
            write_part(calls, calls_dir, final.name)
        segment.unlink()
        return len(calls)
    finally:
        os.close(fd)


def roll_all(spool_dir: Path, calls_dir: Path) -> tuple[int, int]:
    """Roll every segment no live process holds. Returns (segments rolled, calls written)."""
    segments = rolled = 0
    if not spool_dir.exists():
        return 0, 0
    for seg in sorted(spool_dir.glob(f"*{SEGMENT_SUFFIX}")):
        n = roll_segment(seg, calls_dir)
        if n is not None:
            segments += 1
            rolled += n
    for stale in calls_dir.glob(".part-*.tmp") if calls_dir.exists() else []:
        stale.unlink(missing_ok=True)  # left by a roller killed mid-write; its segment is still there
    return segments, rolled
