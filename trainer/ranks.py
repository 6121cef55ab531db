"""The processes of a run: one Accelerator per rank, set up for long runs on many GPUs, and the decisions
every rank must take together (the time budget)."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

from trainer.config import TrainConfig


def accelerator(cfg: TrainConfig, **kwargs: Any) -> Accelerator:
    """The run's Accelerator: ranks wait `dist_timeout_minutes` at a collective, DDP keeps no second copy
    of the gradients, and CUDA's allocator grows segments in place (a step's sizes vary all run long:
    fixed segments fragment into OOMs)."""
    if "PYTORCH_ALLOC_CONF" not in os.environ:  # read when CUDA first allocates, so set before
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    timeout = InitProcessGroupKwargs(timeout=timedelta(minutes=cfg.dist_timeout_minutes))
    # DDP's gradients as views of its all-reduce buckets: not a second copy of every gradient (3.9 GiB
    # for a Qwen3-8B drafter)
    ddp = DistributedDataParallelKwargs(gradient_as_bucket_view=True)
    return Accelerator(
        cpu=not torch.cuda.is_available(),  # several CPU processes (torchrun) then train as DDP over gloo
        kwargs_handlers=[timeout, ddp],
        **kwargs,
    )


def out_of_time(acc: Accelerator, t0: float, minutes: float) -> bool:
    """Whether the budget is spent, as every rank agrees (the slowest rank's clock decides)."""
    spent = float(time.monotonic() - t0 > minutes * 60)
    if acc.num_processes == 1:
        return bool(spent)
    return bool(acc.reduce(torch.tensor([spent], device=acc.device), "max").item())
