"""Writing a file so that a reader, a crash or a kill never sees it half-written: the one helper every
package uses. The bytes go to a hidden temporary name beside the file (readers that list a folder skip
names starting with "."), are flushed to disk, the name is renamed over the file, and the folder is
flushed too, so the rename itself survives a power loss. A failure leaves the old file as it was."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Flush ``path`` to disk: a written file, or a directory after a rename or a new file in it (so the
    entry itself survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary(final: Path) -> Path:
    return final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def leftovers(final: Path) -> list[Path]:
    """The temporaries of `final` that writers killed mid-write left (any process's, any thread's): for a
    caller that knows no other writer of `final` is alive, to remove before writing it again."""
    return sorted(final.parent.glob(f".{final.name}.*.tmp"))


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """A temporary path to write `final`'s new content to (by any writer: safetensors, pyarrow, ...); when
    the block ends without an error it becomes `final`, durably. Threads and processes may race: each
    writes its own temporary, the last rename wins, and every reader sees one whole version."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(final)
    try:
        yield tmp
        fsync_path(tmp)
        tmp.replace(final)
        fsync_path(final.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(final: Path, data: bytes) -> Path:
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)
    return final


def write_text(final: Path, text: str) -> Path:
    return write_bytes(final, text.encode())
