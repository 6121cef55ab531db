"""What a run shows and records while it trains: a progress bar (or plain lines) and ``metrics.jsonl``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from trainer.dflash.helpers import acceptance_from_accuracy


class Progress:
    """A rich progress bar with loss, per-position accuracy and throughput (main process only); on a
    non-terminal (a log file, CI) one line every 10 seconds instead."""

    def __init__(self, total: int, start: int, block_size: int, enabled: bool) -> None:
        self.enabled = enabled
        self.total = total
        self.show = min(block_size - 1, 6)
        self._bar: RichProgress | None = None
        self._last_log = 0.0
        if enabled and sys.stdout.isatty():
            self._bar = RichProgress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[stats]}"),
            )
            self._bar.start()
            self._task = self._bar.add_task("train", total=total, completed=start, stats="")

    def update(self, step: int, loss: float, acc: list[float], tok_s: float) -> None:
        if not self.enabled:
            return
        accs = " ".join(f"{a:.2f}" for a in acc[: self.show])
        stats = f"loss {loss:.3f} | acc@1..{self.show} {accs} | {tok_s:,.0f} tok/s"
        if self._bar is not None:
            self._bar.update(self._task, completed=step, stats=stats)
        elif time.monotonic() - self._last_log > 10 or step == self.total:
            self._last_log = time.monotonic()
            typer.echo(f"step {step}/{self.total}: {stats}")

    def say(self, text: str) -> None:
        """A line of its own above the bar on a terminal, a plain line off one."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.console.print(text, highlight=False, markup=False)
        else:
            typer.echo(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


class Meter:
    """Per-slot accuracy, loss and token counts since the last log line (this rank's share). The loss
    stays on the device until ``record``: no host synchronisation per step, only per log line."""

    def __init__(self, block_size: int, device: torch.device) -> None:
        self.correct = torch.zeros(block_size - 1, device=device)
        self.total = torch.zeros(block_size - 1, device=device)
        self.loss_sum = torch.zeros((), device=device)
        self.steps = 0
        self.tokens = 0  # positions whose features fed the drafter, since the start of this process
        self.computed = 0  # positions the target computed for them (shared prefixes and reuse: fewer)
        self.supervised = 0

    def add(
        self,
        correct: torch.Tensor,
        total: torch.Tensor,
        loss: torch.Tensor,
        tokens: int,
        supervised: int,
        computed: int = 0,
    ) -> None:
        self.correct += correct
        self.total += total
        self.loss_sum += loss.detach().float()
        self.steps += 1
        self.tokens += tokens
        self.supervised += supervised
        self.computed += computed

    def record(
        self, acc: Any, step: int, epoch: float, lr: float, world: int, elapsed: float
    ) -> dict[str, Any]:
        """The metrics line over every rank (``acc`` is the Accelerator: the counts are summed), then reset."""
        c, t = acc.reduce(self.correct, "sum"), acc.reduce(self.total, "sum")
        acc_pos = (c / t.clamp_min(1)).tolist()
        rec = {
            "step": step,
            "epoch": round(epoch, 3),
            "loss": round(float(self.loss_sum) / max(1, self.steps), 5),
            "lr": lr,
            "acc": [round(a, 4) for a in acc_pos],
            "tau_teacher_forced": round(float(acceptance_from_accuracy(c, t)), 3),
            "tokens": self.tokens * world,
            "target_tokens": self.computed * world,
            "elapsed_s": round(elapsed, 1),
        }
        self.correct.zero_()
        self.total.zero_()
        self.loss_sum.zero_()
        self.steps = 0
        return rec


def append_jsonl(path: Path, rec: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(rec) + "\n")


def start_trackers(acc: Any, cfg: Any, run_dir: Path) -> None:
    """accelerate's trackers (TensorBoard under ``run_dir/<name>``, W&B in its project), when configured."""
    if not cfg.trackers:
        return
    acc.project_configuration.set_directories(str(run_dir))
    flat = {k: v for k, v in cfg.model_dump().items() if isinstance(v, int | float | str | bool)}
    acc.init_trackers(str(cfg.name), config=flat)


def track(acc: Any, cfg: Any, prefix: str, rec: dict[str, Any]) -> None:
    """One metrics record to the trackers: its scalars, and the accuracy at each draft position."""
    if not cfg.trackers:
        return
    values = {f"{prefix}/{k}": v for k, v in rec.items() if k != "step" and isinstance(v, int | float)}
    values.update({f"{prefix}/acc@{i + 1}": a for i, a in enumerate(rec.get("acc", []))})
    values.update({f"{prefix}/accept@{i + 1}": a for i, a in enumerate(rec.get("accept", []))})
    acc.log(values, step=int(rec["step"]))
