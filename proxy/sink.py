"""Where finished calls go. The relay depends only on the CallSink protocol."""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from proxy.record import Call
from proxy.roller import Prepare, roll_all, roll_segment
from proxy.spool import Health, SpoolWriter

log = logging.getLogger(__name__)
_FIRST_RETRY_S = 1.0


class CallSink(Protocol):
    def submit(self, call: Call) -> concurrent.futures.Future[None]:
        """Accept a finished call; the future resolves when the call is durable."""

    def close(self) -> None: ...

    @property
    def written(self) -> int: ...

    @property
    def depth(self) -> int: ...

    @property
    def health(self) -> Health:
        """Whether calls can be recorded now, and why not."""

    @property
    def spill_dir(self) -> Path | None:
        """Where a large response may spill while it is relayed (None: kept in memory)."""

    def report(self, exc: OSError) -> None:
        """A write for a call (a spill) failed."""


class MemorySink:
    """Keeps calls in a list: for unit tests of the relay."""

    health = Health(True)
    spill_dir = None

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def submit(self, call: Call) -> concurrent.futures.Future[None]:
        self.calls.append(call)
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        fut.set_result(None)
        return fut

    def close(self) -> None:
        pass

    def report(self, exc: OSError) -> None:
        pass

    @property
    def written(self) -> int:
        return len(self.calls)

    @property
    def depth(self) -> int:
        return 0


class SpoolSink:
    """fsync'd spool + a roller thread that turns closed segments into Parquet parts.

    A roll that fails (no space for the part, a bug in assembling one call) is retried with exponential
    backoff up to `retry_max_s` for as long as the proxy runs; whatever is left at exit stays in the spool
    for the next start or `proxy roll`."""

    def __init__(
        self,
        spool_dir: Path,
        calls_dir: Path,
        proxy_id: str,
        *,
        max_records: int,
        max_bytes: int,
        max_age_s: float,
        min_free_bytes: int = 0,
        retry_max_s: float = 60.0,
        prepare: Prepare | None = None,
        on_rolled: Callable[[], None] | None = None,
    ) -> None:
        self._prepare = prepare
        self._on_rolled = on_rolled  # e.g. wake the uploader: a new part is waiting
        self._spool_dir, self._calls_dir = spool_dir, calls_dir
        self._retry_max = retry_max_s
        self._closed: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._written = self._rolled = 0
        self.roll_failures = 0
        self._pending: dict[Path, tuple[float, float]] = {}  # segment -> (next attempt, delay)
        self._writer = SpoolWriter(
            spool_dir,
            proxy_id,
            self._closed.put,
            max_records=max_records,
            max_bytes=max_bytes,
            max_age_s=max_age_s,
            min_free_bytes=min_free_bytes,
        )
        self._roller = threading.Thread(target=self._roll_loop, name="spool-roller", daemon=True)

    @property
    def spill_dir(self) -> Path:
        return self._spool_dir

    @property
    def health(self) -> Health:
        return self._writer.health

    @property
    def roll_pending(self) -> int:
        return len(self._pending)

    def report(self, exc: OSError) -> None:
        self._writer.report(exc)

    def start(self) -> None:
        try:
            segments, calls = roll_all(self._spool_dir, self._calls_dir, self._prepare)
        except Exception:  # what an earlier process left must not stop this one from serving
            log.exception("rolling segments left by an earlier process failed; they stay in the spool")
        else:
            if segments:
                log.info("rolled %d calls left in %d spool segments by an earlier process", calls, segments)
        self._writer.start()
        self._roller.start()

    def submit(self, call: Call) -> concurrent.futures.Future[None]:
        fut = self._writer.submit(call)
        fut.add_done_callback(self._count)
        return fut

    def _count(self, fut: concurrent.futures.Future[None]) -> None:
        if fut.exception() is None:
            with self._lock:
                self._written += 1

    def close(self) -> None:
        self._writer.close()
        self._closed.put(None)
        self._roller.join()

    def _roll_loop(self) -> None:
        while True:
            due = min((t for t, _ in self._pending.values()), default=None)
            wait = None if due is None else max(0.0, due - time.monotonic())
            try:
                segment = self._closed.get(timeout=wait)
            except queue.Empty:
                segment = _NOTHING
            if segment is None:  # closing: one last try for everything, then leave the rest in the spool
                self._roll_due(force=True)
                return
            if segment is not _NOTHING:
                self._pending[segment] = (0.0, _FIRST_RETRY_S)
            self._roll_due(force=False)

    def _roll_due(self, *, force: bool) -> None:
        now = time.monotonic()
        for segment, (due, delay) in sorted(self._pending.items()):
            if due > now and not force:
                continue
            try:
                n = roll_segment(segment, self._calls_dir, self._prepare)
            except Exception:
                self.roll_failures += 1
                self._pending[segment] = (time.monotonic() + delay, min(delay * 2, self._retry_max))
                log.exception("rolling %s failed; retrying in %.0f s", segment.name, delay)
                continue
            del self._pending[segment]
            with self._lock:
                self._rolled += n or 0
            if n and self._on_rolled is not None:
                self._on_rolled()

    @property
    def written(self) -> int:
        return self._written

    @property
    def depth(self) -> int:
        return self._written - self._rolled


_NOTHING = Path("/nonexistent")
