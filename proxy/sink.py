"""Where finished calls go. The relay depends only on the CallSink protocol."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from pathlib import Path
from typing import Protocol

from proxy.record import Call
from proxy.roller import Prepare, roll_all, roll_segment
from proxy.spool import SpoolWriter

log = logging.getLogger(__name__)


class CallSink(Protocol):
    def submit(self, call: Call) -> concurrent.futures.Future[None]:
        """Accept a finished call; the future resolves when the call is durable."""

    def close(self) -> None: ...

    @property
    def written(self) -> int: ...

    @property
    def depth(self) -> int: ...


async def durable(fut: concurrent.futures.Future[None]) -> None:
    await asyncio.wrap_future(fut)


class MemorySink:
    """Keeps calls in a list: for unit tests of the relay."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def submit(self, call: Call) -> concurrent.futures.Future[None]:
        self.calls.append(call)
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        fut.set_result(None)
        return fut

    def close(self) -> None:
        pass

    @property
    def written(self) -> int:
        return len(self.calls)

    @property
    def depth(self) -> int:
        return 0


class SpoolSink:
    """fsync'd spool + a roller thread that turns closed segments into Parquet parts."""

    def __init__(
        self,
        spool_dir: Path,
        calls_dir: Path,
        proxy_id: str,
        *,
        max_records: int,
        max_bytes: int,
        max_age_s: float,
        prepare: Prepare | None = None,
    ) -> None:
        self._prepare = prepare
        self._spool_dir, self._calls_dir = spool_dir, calls_dir
        self._closed: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._written = self._rolled = 0
        self._writer = SpoolWriter(
            spool_dir,
            proxy_id,
            self._closed.put,
            max_records=max_records,
            max_bytes=max_bytes,
            max_age_s=max_age_s,
        )
        self._roller = threading.Thread(target=self._roll_loop, name="spool-roller", daemon=True)

    def start(self) -> None:
        segments, calls = roll_all(self._spool_dir, self._calls_dir)
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
        while (segment := self._closed.get()) is not None:
            try:
                n = roll_segment(segment, self._calls_dir, self._prepare)
            except Exception:  # keep the segment; `proxy roll` or the next start retries it
                log.exception("rolling %s failed", segment)
                continue
            with self._lock:
                self._rolled += n or 0

    @property
    def written(self) -> int:
        return self._written

    @property
    def depth(self) -> int:
        return self._written - self._rolled
