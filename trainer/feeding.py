"""How packed steps reach the accelerator during training.

- features are computed once per unit (``packed.FeatureMemo``: the parts of a split session in a row);
- with ``cache_features`` a step is kept after its first use in host memory, pinned on a GPU host (not on
  the accelerator: a run's cached features may be far larger than its memory);
- a kept step is copied to the accelerator on a side stream while the step before it computes, so a
  cached epoch never waits on a host-to-device copy (``prefetch`` then ``take``: the compute stream waits
  on that copy's event alone, and every copied tensor is recorded on it before it can be freed);
- features from files or a server (``cache``, ``vllm``) are read on a thread of their own while the step
  before trains (gigabytes a step from disk for a large target), into pinned memory on a GPU host; one
  read at a time, so the memo of split sessions is never shared by two threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from lm.model import Target
from trainer.config import TrainConfig
from trainer.data.units import Unit
from trainer.packed import FeatureMemo, PackedStep, step_for
from trainer.sources.select import kind_of


class StepFeed:
    """The packed step for a pick of the epoch's steps, with the positions the target computed for it."""

    def __init__(self, cfg: TrainConfig, target: Target, layer_ids: list[int], device: torch.device) -> None:
        self.cfg, self.target, self.layer_ids, self.device = cfg, target, layer_ids, device
        self.memo = FeatureMemo()
        self.kept: dict[int, PackedStep] = {}
        self.ahead: dict[int, tuple[PackedStep, torch.cuda.Event]] = {}
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.reads_ahead = not kind_of(cfg.feature_source).in_process  # else the target computes them here
        self.reader: ThreadPoolExecutor | None = None  # started at the first read ahead
        self.reading: dict[int, Future[PackedStep]] = {}

    def new_epoch(self, steps: list[list[Unit]]) -> None:
        """The steps this rank takes this epoch, in order: a split session's features are kept until
        its last part among them."""
        self.memo.plan(steps)

    def prefetch(self, pick: int, units: list[Unit] | None = None) -> None:
        """Start bringing step `pick` closer: a kept step copied to the accelerator (on a GPU), or a step
        whose features come from files or a server read on the reader thread."""
        if pick not in self.kept:
            if self.reads_ahead and units is not None and pick not in self.reading:
                self._settle()
                if self.reader is None:
                    self.reader = ThreadPoolExecutor(1, thread_name_prefix="feature-reader")
                self.reading[pick] = self.reader.submit(self._read, units)
            return
        if self.stream is None or pick in self.ahead:
            return
        with torch.cuda.stream(self.stream):
            step = to_device(self.kept[pick], self.device)
            done = torch.cuda.Event()
            done.record(self.stream)
        self.ahead[pick] = (step, done)

    def take(self, pick: int, units: list[Unit]) -> tuple[PackedStep, int]:
        if pick in self.ahead:
            step, done = self.ahead.pop(pick)
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(done)  # this step's copy only, not a later prefetch
            for t in _tensors(step):
                t.record_stream(compute)  # made on the side stream: freed only after the compute uses it
            return step, 0
        if pick in self.kept:
            return to_device(self.kept[pick], self.device), 0
        if pick in self.reading:
            step = to_device(self.reading.pop(pick).result(), self.device)
        else:
            self._settle()
            step = step_for(self.cfg, self.target, units, self.layer_ids, self.device, self.memo)
        if self.cfg.cache_features:
            self.kept[pick] = host_copy(step)
        return step, step.target_tokens

    def _read(self, units: list[Unit]) -> PackedStep:
        """On the reader thread: the step built on the host, pinned when a GPU will read it."""
        step = step_for(self.cfg, self.target, units, self.layer_ids, torch.device("cpu"), self.memo)
        return host_copy(step, pin=self.device.type == "cuda")

    def _settle(self) -> None:
        """Wait for the read in flight (its step stays for `take`)."""
        for future in list(self.reading.values()):
            future.result()


def _tensors(step: PackedStep) -> list[torch.Tensor]:
    layout = step.layout
    labels = [] if step.label_ids is None else [step.label_ids]
    return [step.taps, step.input_ids, step.loss_mask, layout.seg, layout.pos, layout.share, *labels]


def _map_step(step: PackedStep, fn: Callable[[torch.Tensor], torch.Tensor]) -> PackedStep:
    """The step with ``fn`` applied to the tensors the accelerator reads (the host-side copies stay)."""
    return dataclasses.replace(
        step,
        taps=fn(step.taps),
        input_ids=fn(step.input_ids),
        loss_mask=fn(step.loss_mask),
        layout=step.layout.map(fn),
        label_ids=None if step.label_ids is None else fn(step.label_ids),
    )


def host_copy(step: PackedStep, pin: bool | None = None) -> PackedStep:
    """The step's tensors in host memory, pinned when a GPU will read them (an asynchronous copy);
    `pin`: whether to pin (default: when the step is on a GPU now)."""
    pin = step.taps.is_cuda if pin is None else pin

    def host(t: torch.Tensor) -> torch.Tensor:
        if not pin:
            return t.cpu()
        # straight into page-locked memory of the exact size (t.cpu().pin_memory() copies twice)
        return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t)

    return _map_step(step, host)


def to_device(step: PackedStep, device: torch.device) -> PackedStep:
    """A host copy back on ``device``, copied without blocking the host (pinned memory)."""
    if step.taps.device == device:
        return step

    def dev(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, non_blocking=True)

    return _map_step(step, dev)
