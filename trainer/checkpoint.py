"""Checkpoints, resume and the stop signal of a training run.

A checkpoint is ``runs/<name>/checkpoints/step-N/``: accelerate's state (drafter, AdamW, schedule, RNG)
plus ``trainer_state.json`` (the optimizer step and the micro-batches consumed), written last, so a
directory without it is an interrupted save and is ignored. Re-running a run resumes from the newest.

SIGTERM (Slurm's warning before the time limit or a preemption, Kubernetes' pod termination) does not
kill the step: the handler only records it, every rank agrees at the next optimizer step, the run
checkpoints and exits ``128 + signal``.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from accelerate import Accelerator

STATE_FILE = "trainer_state.json"


@dataclass
class Position:
    """Where a run stands: optimizer steps done and micro-batches this rank consumed by then."""

    step: int = 0
    micro: int = 0


def _step_of(path: Path) -> int:
    return int(path.name.split("-")[1])


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"), key=_step_of)
    ckpts = [c for c in ckpts if (c / STATE_FILE).exists()]
    return ckpts[-1] if ckpts else None


def save_checkpoint(acc: Accelerator, run_dir: Path, pos: Position, keep: int) -> Path:
    """Every rank saves its part; the main process then writes the state file and prunes old ones."""
    path = run_dir / "checkpoints" / f"step-{pos.step}"
    acc.save_state(str(path))
    if acc.is_main_process:
        state = {"step": pos.step, "micro": pos.micro, "time": time.time()}
        (path / STATE_FILE).write_text(json.dumps(state))
        old = sorted((run_dir / "checkpoints").glob("step-*"), key=_step_of)
        for p in old[:-keep]:
            shutil.rmtree(p, ignore_errors=True)
    acc.wait_for_everyone()
    return path


def resume(acc: Accelerator, run_dir: Path) -> tuple[Position, Path | None]:
    """Load the newest checkpoint into the prepared objects; the position it was saved at."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return Position(), None
    acc.load_state(str(ckpt))
    state = json.loads((ckpt / STATE_FILE).read_text())
    return Position(step=int(state["step"]), micro=int(state["micro"])), ckpt


class StopSignal:
    """Records SIGTERM instead of dying. ``stopping`` changes only in ``agreed()``, called by every rank
    at each optimizer step, so all ranks leave the loop at the same step (a rank that left alone would
    hang the others in their next collective). A context manager: the previous handler is back however
    the loop ends."""

    def __init__(self, acc: Accelerator) -> None:
        self.acc = acc
        self.signum = 0  # what this process received
        self.stopping = 0  # what the ranks agreed on
        self._previous: Any = None
        self._pending: tuple[torch.Tensor, Any] | None = None  # the last reduction started (agreed)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum

    def __enter__(self) -> StopSignal:
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def __exit__(self, *_exc: object) -> None:
        signal.signal(signal.SIGTERM, self._previous)

    def agreed(self) -> int:
        """The signal any rank had received by the previous optimizer step (0: none), now the value of
        ``stopping`` on every rank.

        With several ranks each call starts a max-reduce of this rank's signal, copied to the host
        without blocking, and reads the one started at the call before: every rank reads the same
        reduction, so they stop at the same step (one step after the signal), and the host never waits
        for the step it just queued (reading this step's result would synchronise with all of it)."""
        if self.acc.num_processes == 1:
            self.stopping = self.signum
            return self.stopping
        dev = self.acc.device
        reduced = self.acc.reduce(torch.full((1,), self.signum, device=dev), "max")  # a fill: no copy
        done = None
        if dev.type == "cuda":
            host = torch.empty(1, dtype=reduced.dtype, pin_memory=True).copy_(reduced, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        else:
            host = reduced
        previous, self._pending = self._pending, (host, done)
        if previous is not None:
            value, event = previous
            if event is not None:
                event.synchronize()  # the previous step's reduction: long done, unlike this step's
            self.stopping = int(value.item())
        return self.stopping
