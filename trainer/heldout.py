"""Held-out evaluation during training: teacher-forced loss and per-position accuracy on the eval split.

Every ``eval_every`` optimizer steps each rank runs the same held-out packed steps with no gradient (all
ranks take part, as a sharded drafter needs) and the main process appends one line to
``heldout.jsonl`` (and to the trackers): the loss, the accuracy at each draft position and the
teacher-forced acceptance estimate. Real tau comes from ``python -m trainer eval`` after training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from lm.model import Target
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.data.units import Unit, pack, session_units
from trainer.dflash import helpers as H
from trainer.drafting import Drafting, step_loss
from trainer.feeding import host_copy, to_device
from trainer.packed import FeatureMemo, PackedStep, sample_anchors, step_for

MAX_STEPS = 16  # held-out packed steps per evaluation: enough for a stable estimate, cheap next to training


class HeldOut:
    def __init__(self, cfg: TrainConfig, data_dir: Path) -> None:
        path = data_dir / "eval.parquet"
        seqs = data_build.read(path) if path.exists() else []
        self.steps: list[list[Unit]] = pack(session_units(seqs, cfg.prefix_sharing), cfg.max_len)[:MAX_STEPS]
        self.cfg = cfg
        self._cached: dict[int, PackedStep] = {}
        self._memo = FeatureMemo()  # a split held-out session computed once for all its parts

    def __bool__(self) -> bool:
        return bool(self.steps)

    @torch.no_grad()
    def run(
        self, acc: Accelerator, target: Target, d: Drafting, weights: torch.Tensor, flex: bool
    ) -> dict[str, Any]:
        cfg, b = self.cfg, self.cfg.block_size
        correct = torch.zeros(b - 1, device=acc.device)
        total = torch.zeros(b - 1, device=acc.device)
        loss_sum = torch.zeros((), device=acc.device)
        weight_sum = torch.zeros((), device=acc.device)
        d.model.eval()
        for i, units in enumerate(self.steps):
            kept = self._cached.get(i)
            if kept is None:
                step = step_for(cfg, target, units, d.layer_ids, acc.device, self._memo)
                # reused at every evaluation, from host memory: the accelerator's is the training's
                self._cached[i] = host_copy(step)
            else:
                step = to_device(kept, acc.device)
            gen = torch.Generator().manual_seed(cfg.seed + i)
            anchors = sample_anchors(step, cfg.anchors, gen, cfg.step_anchors, cfg.anchor_tokens)
            out = step_loss(d, target, step, anchors, block_size=b, weights=weights, flex=flex)
            correct += out.correct
            total += out.total
            loss_sum += out.loss.detach() * out.weight
            weight_sum += out.weight
        d.model.train()
        acc_pos = (correct / total.clamp_min(1)).tolist()
        return {
            "loss": round(float(loss_sum / weight_sum.clamp_min(1e-9)), 5),
            "acc": [round(a, 4) for a in acc_pos],
            "tau_teacher_forced": round(float(H.acceptance_from_accuracy(correct, total)), 3),
            "labels": int(total.sum()),
        }
