"""The fsync'd spool: group-committed append-only segments, one writer thread per proxy process.

A call is acknowledged only after the fsync that covers its frame. A write that fails (a full disk, an I/O
error) is cut back: the segment is truncated to where the failed frame began, so the segment stays a clean
sequence of whole frames and later frames are never appended behind a partial one; if even that fails, the
segment is closed and the next call opens a new one (the roller skips a damaged frame by its checksum).
A segment is held under an exclusive flock while open, so another process's roller can tell a live segment
from one a dead process left.

`health` says whether calls can be recorded: not after a failed write until a probe write succeeds again,
and not while the spool's file system has less than `min_free_bytes` free.
"""

from __future__ import annotations

import concurrent.futures
import errno
import fcntl
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proxy.record import Call
from records.atomic import fsync_path

log = logging.getLogger(__name__)
SEGMENT_SUFFIX = ".spool"
_STOP = object()
_PROBE_EVERY_S = 0.5


@dataclass(frozen=True)
class Health:
    ok: bool
    reason: str | None = None
    free_bytes: int | None = None


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
        min_free_bytes: int = 0,
    ) -> None:
        self._dir = spool_dir
        self._proxy_id = proxy_id
        self._on_closed = on_segment_closed
        self._max_records, self._max_bytes, self._max_age = max_records, max_bytes, max_age_s
        self._min_free = min_free_bytes
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._seq = 0
        self._fd: int | None = None
        self._path: Path | None = None
        self._records = self._size = 0
        self._opened_at = 0.0
        self._failure: str | None = None  # the last failed write, until a probe succeeds
        self._probed_at = 0.0
        self.health = Health(True)
        self._thread = threading.Thread(target=self._run, name="spool-writer", daemon=True)

    def start(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        self._probe()
        self._thread.start()

    def submit(self, call: Call) -> concurrent.futures.Future[None]:
        """Queue a call; the future resolves once its frame is on disk and fsync'd (or fails with why not)."""
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._queue.put((call, fut))
        return fut

    def report(self, exc: OSError) -> None:
        """A write elsewhere in the spool folder (a response spill) failed: stop accepting calls until a
        probe succeeds."""
        self._fail(exc)

    def close(self) -> None:
        """Flush, close the open segment (handing it to the roller) and stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=min(_PROBE_EVERY_S, max(0.05, self._max_age / 4)))
            except queue.Empty:
                self._idle()
                continue
            batch = [item]
            # Group commit: everything already queued shares one fsync.
            while len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._write_batch([b for b in batch if b is not _STOP])  # type: ignore[misc]
            if any(b is _STOP for b in batch):
                self._close_segment()
                return
            self._idle()

    def _idle(self) -> None:
        if self._fd is not None and time.monotonic() - self._opened_at >= self._max_age:
            self._close_segment()
        if time.monotonic() - self._probed_at >= _PROBE_EVERY_S:
            self._probe()

    def _write_batch(self, batch: list[tuple[Call, concurrent.futures.Future[None]]]) -> None:
        if not batch:
            return
        written: list[concurrent.futures.Future[None]] = []
        failed: list[tuple[concurrent.futures.Future[None], BaseException]] = []
        disk_error: OSError | None = None
        try:
            if self._fd is None:
                self._open_segment()
        except OSError as exc:
            self._fail(exc)
            disk_error = exc
        batch_start = self._size
        for call, fut in batch:
            try:
                if disk_error is not None or self._fd is None:
                    raise disk_error or OSError(errno.EIO, "spool segment closed after a failed write")
                self._append(self._fd, call)
                written.append(fut)
            except OSError as exc:  # the disk: this call and the rest of the batch are not recorded
                disk_error = exc
                failed.append((fut, exc))
            except Exception as exc:  # this call's frame could not be made: only it fails
                failed.append((fut, exc))
        if written and not self._sync(batch_start, written, failed):
            written = []
        for fut in written:
            fut.set_result(None)
        for fut, error in failed:
            fut.set_exception(error)
        if self._fd is not None and (self._records >= self._max_records or self._size >= self._max_bytes):
            self._close_segment()

    def _append(self, fd: int, call: Call) -> None:
        start = self._size
        try:
            for piece in call.frame():
                view = memoryview(piece)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                    self._size += n
        except BaseException as exc:
            self._cut_back(start)
            if isinstance(exc, OSError):
                self._fail(exc)
            raise
        self._records += 1

    def _sync(
        self,
        batch_start: int,
        written: list[concurrent.futures.Future[None]],
        failed: list[tuple[concurrent.futures.Future[None], BaseException]],
    ) -> bool:
        assert self._fd is not None
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            # After a failed fsync nothing written since the last good one can be trusted.
            self._fail(exc)
            failed += [(fut, exc) for fut in written]
            self._cut_back(batch_start)
            self._close_segment()
            return False
        if self._failure is None:
            self.health = self._space()
        return True

    def _cut_back(self, start: int) -> None:
        """Remove a partly written frame; if the file cannot be cut, leave it to the roller and move on."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, start)
            self._size = start
        except OSError:
            log.exception("could not truncate %s after a failed write; starting a new segment", self._path)
            self._close_segment()

    def _fail(self, exc: OSError) -> None:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        what = "disk full" if full else f"write failed ({exc.strerror or exc})"
        self._failure = f"{what} in {self._dir}"
        self.health = Health(False, f"cannot record calls: {self._failure}", self._free())
        log.error("spool: %s", self._failure)

    def _probe(self) -> None:
        """Refresh `health`: free space, and after a failure a small test write that must succeed."""
        self._probed_at = time.monotonic()
        if self._failure is not None:
            probe = self._dir / f".probe-{self._proxy_id}"
            try:
                fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.write(fd, b"\0" * 4096)
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
                    probe.unlink(missing_ok=True)
            except OSError:
                return
            log.warning("spool: writes succeed again in %s", self._dir)
            self._failure = None
        self.health = self._space()

    def _free(self) -> int | None:
        try:
            st = os.statvfs(self._dir)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def _space(self) -> Health:
        free = self._free()
        if free is not None and free < self._min_free:
            return Health(
                False,
                f"cannot record calls: disk full ({free} bytes free in {self._dir}, needs {self._min_free})",
                free,
            )
        return Health(True, None, free)

    def _open_segment(self) -> int:
        self._seq += 1
        name = f"{self._proxy_id}-{int(time.time() * 1000):013d}-{self._seq:06d}{SEGMENT_SUFFIX}"
        path = self._dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            fsync_path(self._dir)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._fd, self._path = fd, path
        self._records, self._size, self._opened_at = 0, 0, time.monotonic()
        return fd

    def _close_segment(self) -> None:
        if self._fd is None or self._path is None:
            return
        path, fd = self._path, self._fd
        self._fd = self._path = None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        if self._records == 0 and path.stat().st_size == 0:
            path.unlink(missing_ok=True)  # nothing in it: no part to roll
            return
        self._on_closed(path)
