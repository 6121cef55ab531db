"""The fsync'd spool: group-committed append-only segments, one writer thread per proxy process.

A call is acknowledged only after the fsync that covers it. A segment is held under an exclusive
flock while open, so another process's roller can tell a live segment from one a dead process left.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from proxy.record import Call

SEGMENT_SUFFIX = ".spool"
_STOP = object()


class SpoolWriter:
    def __init__(
        self,
        spool_dir: Path,
        proxy_id: str,
        on_segment_closed: Callable[[Path], None],
        *,
        max_records: int = 2000,
        max_bytes: int = 64 * 1024 * 1024,
        max_age_s: float = 60.0,
    ) -> None:
        self._dir = spool_dir
        self._proxy_id = proxy_id
        self._on_closed = on_segment_closed
        self._max_records, self._max_bytes, self._max_age = max_records, max_bytes, max_age_s
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._seq = 0
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._records = self._bytes = 0
        self._opened_at = 0.0
        self._thread = threading.Thread(target=self._run, name="spool-writer", daemon=True)

    def start(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def submit(self, call: Call) -> concurrent.futures.Future[None]:
        """Queue a call; the future resolves once it is on disk and fsync'd."""
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._queue.put((call, fut))
        return fut

    def close(self) -> None:
        """Flush, close the open segment (handing it to the roller) and stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=max(0.05, self._max_age / 4))
            except queue.Empty:
                self._rotate_if_old()
                continue
            batch = [item]
            # Group commit: everything already queued shares one fsync.
            while len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(b is _STOP for b in batch)
            self._write_batch([b for b in batch if b is not _STOP])  # type: ignore[misc]
            if stop:
                self._close_segment()
                return
            self._rotate_if_old()

    def _write_batch(self, batch: list[tuple[Call, concurrent.futures.Future[None]]]) -> None:
        if not batch:
            return
        try:
            f = self._file or self._open_segment()
            for call, _ in batch:
                data = call.encode()
                f.write(data)
                self._records += 1
                self._bytes += len(data)
            f.flush()
            os.fdatasync(f.fileno())
        except Exception as exc:  # a failing disk must surface to every waiting call, not kill the thread
            for _, fut in batch:
                fut.set_exception(exc)
            return
        for _, fut in batch:
            fut.set_result(None)
        if self._records >= self._max_records or self._bytes >= self._max_bytes:
            self._close_segment()

    def _open_segment(self) -> BinaryIO:
        self._seq += 1
        name = f"{self._proxy_id}-{int(time.time() * 1000):013d}-{self._seq:06d}{SEGMENT_SUFFIX}"
        self._path = self._dir / name
        f = self._path.open("ab")
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        _fsync_dir(self._dir)
        self._file, self._records, self._bytes, self._opened_at = f, 0, 0, time.monotonic()
        return f

    def _rotate_if_old(self) -> None:
        if self._file is not None and time.monotonic() - self._opened_at >= self._max_age:
            self._close_segment()

    def _close_segment(self) -> None:
        if self._file is None or self._path is None:
            return
        path, f = self._path, self._file
        self._file = self._path = None
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        f.close()
        self._on_closed(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
