"""The rows benchmarks/gpu_trainer.py adds to its lengths × sources grid, at its first length: the steps a
real run meets that the grid does not — steps of one segment (a session of one call), a session split over
several steps (longer than `max_len`), a cached epoch fed by the side-stream prefetch, the held-out
evaluation under no_grad (graphs of their own), and flex attention's loss against the dense path's on the
same step. Each row is kept whatever happens in it (`row_of`)."""

from __future__ import annotations

import importlib.metadata as md
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from gpu_trainer_core import Run, measure, peak_gib, row_of, sessions, with_

import trainer.train as train_mod
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.dflash.objective import dflash_loss
from trainer.feeding import StepFeed
from trainer.heldout import HeldOut
from trainer.packed import plan_steps, sample_anchors, valid_rows


def versions() -> dict[str, Any]:
    """What a failure report needs first."""
    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    out["cuda"] = torch.version.cuda
    out["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    for name in ("triton", "transformers", "accelerate"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def one_segment(run: Run, cfg: TrainConfig, n: int) -> None:
    """Sessions of one call each: units of one segment (no shared prefix), a graph of their own."""
    seqs = sessions(n, run.target.vocab_size)[::2]
    measure(run, cfg, n, plan_steps(cfg, seqs), kind="one-segment")


def split(run: Run, cfg: TrainConfig, n: int) -> None:
    """A session longer than `max_len`: its parts are steps of their own, read from the features kept
    for the session (computed once, on the host between its parts)."""
    tight = with_(cfg, max_len=max(16, n // 2))
    steps = plan_steps(tight, sessions(n, run.target.vocab_size, count=1))
    measure(run, tight, n, steps, kind="split", parts=len(steps))


def prefetch(run: Run, cfg: TrainConfig, n: int) -> None:
    """Two epochs over cached features as the loop runs them: the first computes and keeps each step in
    host memory, the second copies the next step on a side stream while this one trains. The row: the
    second epoch's seconds per step."""
    cfg = with_(cfg, cache_features=True, max_len=n + n // 2)  # a session a step: three steps
    steps = plan_steps(cfg, sessions(n, run.target.vocab_size, count=3))
    feed, acc, d = StepFeed(cfg, run.target, run.d.layer_ids, run.acc.device), run.acc, run.d
    with row_of(run, length=n, source=cfg.feature_source, kind="cached-prefetch") as row:
        feed.new_epoch(steps)
        for epoch in range(2):
            t0 = time.perf_counter()
            for pick in range(len(steps)):
                if epoch and pick + 1 < len(steps):
                    feed.prefetch(pick + 1, steps[pick + 1])
                out, *_ = train_mod.train_step(
                    acc, cfg, run.target, d, steps[pick], pick, run.micro, run.weights, run.flex, feed
                )
                run.micro += 1
            loss = float(out.loss.detach())
            row[f"epoch{epoch + 1}_step_s"] = round((time.perf_counter() - t0) / len(steps), 4)
        row.update(steps=len(steps), kept=len(feed.kept), loss=round(loss, 5), peak_gpu_gib=peak_gib(run))


def heldout(run: Run, cfg: TrainConfig, n: int) -> None:
    """The loop's held-out evaluation (no_grad, the drafter in eval mode) over sessions written as a run's
    eval split: twice, the second reading its steps back from host memory."""
    seqs = sessions(n, run.target.vocab_size)
    cfg = with_(cfg, max_len=max(cfg.max_len, n + n // 2))
    with tempfile.TemporaryDirectory() as tmp, row_of(run, length=n, source="hf", kind="heldout") as row:
        data_build.write(data_build.BuildResult([], seqs, {}), Path(tmp))
        held = HeldOut(cfg, Path(tmp), labels="text")  # random text follows no greedy chain
        for i in range(2):
            t0 = time.perf_counter()
            rec = held.run(run.acc, run.target, run.d, run.weights, run.flex)
            row[f"pass{i + 1}_s"] = round(time.perf_counter() - t0, 4)
        row.update(
            steps=len(held.steps),
            loss=rec["loss"],
            blocks=rec["blocks"],
            tau=rec["tau"],
            peak_gpu_gib=peak_gib(run),
        )


def flex_vs_dense(run: Run, cfg: TrainConfig, n: int) -> None:
    """The same step and anchors through flex attention (compiled on a GPU) and the dense mask (SDPA):
    the losses agree to the training dtype's rounding, or the block mask is wrong."""
    cfg = with_(cfg, max_len=max(cfg.max_len, n + n // 2))
    units = plan_steps(cfg, sessions(n, run.target.vocab_size, count=1))[0]
    feed = StepFeed(cfg, run.target, run.d.layer_ids, run.acc.device)
    with row_of(run, length=n, source="hf", kind="flex-vs-dense") as row, torch.no_grad():
        step, _ = feed.take(0, units)
        gen = torch.Generator().manual_seed(0)
        anchors = sample_anchors(step, cfg.anchors, gen, cfg.step_anchors, cfg.anchor_tokens)
        losses = {}
        for name, flex in (("flex", True), ("dense", False)):
            with run.acc.autocast():
                out = dflash_loss(
                    run.d.model,
                    taps=step.taps,
                    input_ids=step.input_ids,
                    loss_mask=step.loss_mask,
                    anchors=anchors.to(step.input_ids.device),
                    rows=valid_rows(step, anchors, cfg.block_size),
                    embed_weight=run.d.embed,
                    lm_head_weight=run.d.head,
                    block_size=cfg.block_size,
                    mask_token_id=run.d.mask_id,
                    weights=run.weights,
                    flex=flex,
                    layout=step.layout,
                )
            losses[name] = float(out.loss)
        row.update(loss_flex=round(losses["flex"], 6), loss_dense=round(losses["dense"], 6))
        row["rel_diff"] = round(abs(losses["flex"] - losses["dense"]) / max(abs(losses["dense"]), 1e-9), 6)
        row["peak_gpu_gib"] = peak_gib(run)


def extra_rows(run: Run, cfg: TrainConfig, n: int) -> None:
    for row in (one_segment, split, prefetch, heldout, flex_vs_dense):
        if run.late():
            return
        row(run, cfg, n)
