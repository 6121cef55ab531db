"""Fair sharing of one CPU model between concurrent requests, without blocking the event loop.

A single worker thread runs every model forward. Up to `max_running` requests are interleaved one step
(one forward) at a time in round-robin order, so a long generation cannot starve a short one; the rest
wait in arrival order. Results travel to the requesting coroutine through its own asyncio queue.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass, field

import torch

from lm.engine import Engine, SamplingParams, Step

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Job:
    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[Step | BaseException] = field(default_factory=asyncio.Queue)
    cancelled: bool = False
    steps: Generator[Step, None, None] | None = None
    submitted: float = field(default_factory=time.monotonic)


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        *,
        max_running: int = 4,
        on_start: Callable[[float], None] | None = None,
    ) -> None:
        """`on_start(seconds_waited)` is called from the worker when a request's first forward begins."""
        if max_running < 1:
            raise ValueError("max_running must be at least 1")
        self.engine = engine
        self.max_running = max_running
        self.on_start = on_start
        self._waiting: collections.deque[_Job] = collections.deque()
        self._running: list[_Job] = []
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def start(self) -> None:
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._work, name="target-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncGenerator[Step, None]:
        """The request's steps as the worker produces them; leaving early (a client that disconnects)
        cancels the request, which is dropped before its next forward."""
        job = _Job(list(prompt_ids), params, asyncio.get_running_loop())
        with self._cv:
            self._waiting.append(job)
            self._cv.notify()
        try:
            while True:
                item = await job.out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            job.cancelled = True

    # ---- worker thread ---------------------------------------------------------------------------------
    def _work(self) -> None:
        torch.set_grad_enabled(False)  # grad mode is per thread
        while True:
            with self._cv:
                while not self._stop and not self._running and not self._waiting:
                    self._cv.wait()
                if self._stop:
                    break
                while self._waiting and len(self._running) < self.max_running:
                    self._running.append(self._waiting.popleft())
                batch = list(self._running)
            for job in batch:
                if not self._advance(job):
                    with self._cv:
                        self._running.remove(job)
        for job in [*self._running, *self._waiting]:
            self._close(job)
            self._deliver(job, RuntimeError("the target server is shutting down"))

    def _advance(self, job: _Job) -> bool:
        """Run one step of `job`; False once it is finished, failed or cancelled."""
        if job.cancelled:
            self._close(job)
            return False
        try:
            if job.steps is None:
                if self.on_start is not None:
                    self.on_start(time.monotonic() - job.submitted)
                job.steps = self.engine.steps(job.prompt_ids, job.params)
            step = next(job.steps)
        except Exception as e:  # a failing request must not take the worker down
            log.exception("generation failed")
            self._close(job)
            self._deliver(job, e)
            return False
        if not self._deliver(job, step):
            self._close(job)
            return False
        if step.finish_reason is not None:
            self._close(job)
            return False
        return True

    @staticmethod
    def _close(job: _Job) -> None:
        if job.steps is not None:
            with contextlib.suppress(Exception):
                job.steps.close()

    @staticmethod
    def _deliver(job: _Job, item: Step | BaseException) -> bool:
        try:
            job.loop.call_soon_threadsafe(job.out.put_nowait, item)
        except RuntimeError:  # the request's event loop is gone
            job.cancelled = True
            return False
        return True
