"""Train a DFlash drafter on a target's own traffic. Reads top to bottom:

1. the run directory (``trainer.rundir``) for the validated run config (``trainer.config``);
2. the frozen target (its embeddings, LM head and tapped hidden states feed the drafter);
3. the training sequences, built from the call records (``trainer.data``);
4. the drafter, AdamW, warmup + cosine, prepared by ``accelerate`` (one process, DDP or FSDP), resumed
   from the newest checkpoint (``trainer.checkpoint``);
5. the loop: per sequence one target forward (no grad) gives the features, many anchored blocks share
   it, weighted block cross-entropy, grad clip; checkpoints, SIGTERM, progress and ``metrics.jsonl``;
6. the final drafter in the released DFlash layout (``drafter/``), ready for ``eval`` and ``export``.

Run: ``python -m trainer train --config trainer/configs/cpu.yaml`` or, on GPUs,
``accelerate launch --config_file trainer/configs/accelerate/ddp.yaml -m trainer.train --config ...``
(``python -m trainer submit`` renders exactly that for local, Slurm and Kubernetes).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
import typer
from accelerate import Accelerator
from accelerate.utils import set_seed

from clikit import settings_command
from lm import load_target
from lm.loading import load_shared_weights
from lm.model import Target
from trainer.checkpoint import Position, StopSignal, latest_checkpoint, save_checkpoint
from trainer.checkpoint import resume as resume_from
from trainer.config import TrainConfig
from trainer.config_cli import ConfigFile, Overrides, load_or_exit
from trainer.data import build as data_build
from trainer.data.build import Sequence as TrainSequence
from trainer.data.units import Unit, session_units, sharing_report
from trainer.dflash import helpers as H
from trainer.dflash.objective import StepOutput, use_flex_attention
from trainer.drafting import Drafting, finish, make_drafting, step_loss
from trainer.feeding import StepFeed
from trainer.heldout import HeldOut
from trainer.heldout import line as heldout_line
from trainer.heldout import plot as plot_curve
from trainer.heldout import summary_line as heldout_summary
from trainer.packed import describe_steps, epoch_order, plan_steps, sample_anchors
from trainer.progress import Meter, Progress, append_jsonl, start_trackers, track
from trainer.ranks import accelerator, out_of_time
from trainer.rundir import open_run, resolve_data
from trainer.sources.select import kind_of

__all__ = ["TrainConfig", "latest_checkpoint", "train"]  # the names callers of a training run need


def train(
    cfg: TrainConfig, argv: Sequence[str] = (), resume: bool = True, target: Target | None = None
) -> Path:
    """Run (or resume) the training described by ``cfg``; returns the run directory. ``target``: an
    already loaded ``lm.Target`` instead of loading ``cfg.target`` (tests, benchmarks)."""
    # ---- 1. run directory ---------------------------------------------------------------------------
    mp = cfg.mixed_precision
    if mp == "auto":
        mp = "bf16" if torch.cuda.is_available() else "no"
    acc = accelerator(
        cfg,
        mixed_precision=mp,
        gradient_accumulation_steps=cfg.grad_accum,
        step_scheduler_with_optimizer=False,
        log_with=list(cfg.trackers) or None,  # TensorBoard / W&B through accelerate, off by default
        project_dir=cfg.runs_dir,  # the run's own directory once its name is agreed (start_trackers)
    )
    cfg, run_dir = open_run(acc, cfg, argv)
    start_trackers(acc, cfg, run_dir)
    set_seed(cfg.seed)

    # ---- 2. the frozen target -----------------------------------------------------------------------
    dtype = torch.bfloat16 if mp == "bf16" else torch.float32
    if cfg.target_device_map is not None and acc.num_processes > 1:
        raise SystemExit("target_device_map shards one target over the GPUs: run one process, not several")
    if target is None and not kind_of(cfg.feature_source).in_process and Path(cfg.target).is_dir():
        # features from files or a vLLM server: load only what the drafter shares (any target size)
        target = load_shared_weights(cfg.target, dtype=dtype, device=acc.device)
    elif target is None:  # read straight into the training dtype, on the device (or sharded over GPUs)
        target = load_target(cfg.target, dtype=dtype, device=acc.device, device_map=cfg.target_device_map)
    elif cfg.target_device_map is None:
        target.model.to(acc.device, dtype=dtype)
    target.model.requires_grad_(False)

    # ---- 3. training sequences ----------------------------------------------------------------------
    seqs, report = training_data(acc, cfg, run_dir, target)
    steps = plan_steps(cfg, seqs)
    acc.print(f"steps: {len(steps)} per epoch over all ranks ({describe_steps(cfg, steps)})")

    # ---- 4. drafter, optimizer, schedule; resume ----------------------------------------------------
    d = make_drafting(acc, cfg, target, len(steps))
    pos, ckpt = resume_from(acc, run_dir) if resume else (Position(), None)
    if ckpt is not None:
        acc.print(f"resumed from {ckpt} at step {pos.step}")

    # ---- 5. the loop --------------------------------------------------------------------------------
    t0 = time.monotonic()
    with StopSignal(acc) as stop:
        meter = loop(acc, cfg, run_dir, target, steps, d, pos, stop)
    elapsed = time.monotonic() - t0
    if stop.stopping:
        path = save_checkpoint(acc, run_dir, pos, cfg.keep_checkpoints)
        acc.print(f"signal {stop.stopping}: saved {path}; resume with --set name={cfg.name}")
        raise SystemExit(128 + stop.stopping)

    # ---- 6. the drafter, in the released layout -----------------------------------------------------
    save_checkpoint(acc, run_dir, pos, cfg.keep_checkpoints)
    finish(acc, cfg, run_dir, d, pos, meter, elapsed, len(seqs), report)
    curve = run_dir / "heldout.jsonl"
    if acc.is_main_process and curve.exists():  # the last point's verdict: the run's last word on its drafter
        acc.print(heldout_summary(json.loads(curve.read_text().splitlines()[-1])))
    return run_dir


def training_data(
    acc: Accelerator, cfg: TrainConfig, run_dir: Path, target: Target
) -> tuple[list[TrainSequence], dict[str, Any]]:
    """Built once by the main process into ``run_dir/data`` (a resumed run re-reads the same split)."""
    data_dir = run_dir / "data"
    with acc.main_process_first():
        if acc.is_main_process and not (data_dir / "report.json").exists():
            source = resolve_data(cfg)
            built = data_build.build(
                target,
                source,
                eval_fraction=cfg.eval_fraction,
                model=cfg.model_filter,
                max_context=target.max_position_embeddings,
                regenerated=cfg.regenerated,
            )
            built.report["source"] = str(source)
            every = built.train + built.eval
            per_call = built.report["merge"]["target_tokens_per_call"]
            built.report["sharing"] = sharing_report(every, session_units(every), per_call)
            data_build.write(built, data_dir)
    report = json.loads((data_dir / "report.json").read_text())
    seqs = data_build.read(data_dir / "train.parquet")
    if not seqs:
        raise SystemExit(f"no training sequences from {cfg.data}: see {data_dir / 'report.json'}")
    acc.print(data_build.summary_line(report, len(seqs)))
    return seqs, report


def loop(
    acc: Accelerator,
    cfg: TrainConfig,
    run_dir: Path,
    target: Target,
    steps: list[list[Unit]],
    d: Drafting,
    pos: Position,
    stop: StopSignal,
) -> Meter:
    """Optimizer steps until ``total_steps`` or a stop signal; ``pos`` is advanced in place."""
    weights = H.loss_weights(cfg.block_size, cfg.gamma or H.default_gamma(cfg.block_size), device=acc.device)
    flex = use_flex_attention(acc.device)
    feed = StepFeed(cfg, target, d.layer_ids, acc.device)
    order: list[int] = []
    order_epoch = -1
    progress = Progress(d.total_steps, pos.step, cfg.block_size, enabled=acc.is_main_process)
    meter = Meter(cfg.block_size, acc.device)
    heldout = HeldOut(cfg, run_dir / "data") if cfg.eval_every else None
    micro, world, t0 = pos.micro, acc.num_processes, time.monotonic()
    d.model.train()
    try:
        while pos.step < d.total_steps and not stop.stopping:
            # -- pick this rank's next packed step (a fresh order each epoch, the same on every rank)
            epoch, index = divmod(micro, d.micro_per_epoch)
            first = acc.process_index * d.micro_per_epoch  # this rank's slice of the epoch's order
            if epoch != order_epoch:
                order, order_epoch = epoch_order(steps, cfg.seed + epoch), epoch
                mine = [order[(first + i) % len(steps)] for i in range(index, d.micro_per_epoch)]
                feed.new_epoch([steps[i] for i in mine])
            at = first + index
            pick = order[at % len(steps)]
            if index + 1 < d.micro_per_epoch:  # the next kept step crosses to the GPU during this one
                nxt = order[(at + 1) % len(steps)]
                feed.prefetch(nxt, steps[nxt])
            # -- forward + backward on it (and the optimizer, at the end of an accumulation window)
            out, n_tok, n_sup, n_target = train_step(
                acc, cfg, target, d, steps[pick], pick, micro, weights, flex, feed
            )
            micro += 1
            meter.add(out.correct, out.total, out.loss, n_tok, n_sup, n_target)
            if not acc.sync_gradients:
                continue
            # -- an optimizer step was taken: agree on a stop, log, checkpoint
            pos.step, pos.micro = pos.step + 1, micro
            stop.agreed()
            if cfg.max_minutes and pos.step < d.total_steps and out_of_time(acc, t0, cfg.max_minutes):
                d.planned_steps, d.total_steps = d.total_steps, pos.step  # the loop ends after this step
                acc.print(
                    f"time budget of {cfg.max_minutes:g} min reached at step {pos.step} of {d.planned_steps}"
                )
            if pos.step % cfg.log_every == 0 or pos.step == d.total_steps:
                elapsed = time.monotonic() - t0
                rec = meter.record(
                    acc, pos.step, micro / d.micro_per_epoch, float(d.sched.get_last_lr()[0]), world, elapsed
                )
                if acc.is_main_process:
                    append_jsonl(run_dir / "metrics.jsonl", rec)
                track(acc, cfg, "train", rec)
                progress.update(pos.step, rec["loss"], rec["acc"], rec["tokens"] / max(elapsed, 1e-9))
            if heldout and (pos.step % cfg.eval_every == 0 or pos.step == d.total_steps):
                evaluate_heldout(acc, cfg, run_dir, target, d, heldout, pos.step, weights, flex, progress)
            at_epoch_end = micro % d.micro_per_epoch == 0
            if (cfg.save_every and pos.step % cfg.save_every == 0) or (at_epoch_end and not cfg.save_every):
                save_checkpoint(acc, run_dir, pos, cfg.keep_checkpoints)
    finally:
        progress.close()
    return meter


def evaluate_heldout(
    acc: Accelerator,
    cfg: TrainConfig,
    run_dir: Path,
    target: Target,
    d: Drafting,
    heldout: HeldOut,
    step: int,
    weights: torch.Tensor,
    flex: bool,
    progress: Progress,
) -> None:
    """One point of the learning curve (``trainer.heldout``): a line in heldout.jsonl, the redrawn
    heldout.png, the trackers and a line on the progress output. Also after the last step, so the
    curve always ends at the drafter that is saved."""
    path = run_dir / "heldout.jsonl"
    rec = {"step": step, **heldout.run(acc, target, d, weights, flex)}
    if acc.is_main_process:
        append_jsonl(path, rec)
        plot_curve([json.loads(x) for x in path.read_text().splitlines()], run_dir / "heldout.png")
        progress.say(heldout_line(rec))
    track(acc, cfg, "heldout", rec)


def train_step(
    acc: Accelerator,
    cfg: TrainConfig,
    target: Target,
    d: Drafting,
    units: list[Unit],
    pick: int,
    micro: int,
    weights: torch.Tensor,
    flex: bool,
    feed: StepFeed,
    phase: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext(),
) -> tuple[StepOutput, int, int, int]:
    """One micro step of the loop: the loss of one packed step (the target's features once per shared
    prefix, no grad; anchored blocks per ``cfg.anchors``; every label weighted the same across the step
    and the ranks), backward, and — when the accumulation window closes — clip, optimizer and schedule.
    Returns the loss with the step's positions, supervised tokens and the positions the target computed
    now. ``phase(name)`` brackets each part (``benchmarks/gpu_trainer.py`` times them)."""
    with acc.accumulate(d.model):
        with phase("loss"):
            step, computed = feed.take(pick, units)  # features: trainer/sources, once per unit
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + micro * 131 + acc.process_index)
            anchors = sample_anchors(step, cfg.anchors, gen, cfg.step_anchors, cfg.anchor_tokens)
            out = step_loss(d, target, step, anchors, block_size=cfg.block_size, weights=weights, flex=flex)
            if acc.num_processes > 1:  # DDP averages gradients: rescale so each label weighs the same
                total = acc.reduce(out.weight.clone(), "sum")
                out.loss = out.loss * out.weight * acc.num_processes / total.clamp_min(1e-9)
        with phase("backward"):
            acc.backward(out.loss)
        with phase("optimizer"):
            if acc.sync_gradients and cfg.grad_clip:
                acc.clip_grad_norm_(d.model.parameters(), cfg.grad_clip)
            d.opt.step()
            d.opt.zero_grad(set_to_none=True)
    if acc.sync_gradients:
        with phase("optimizer"):
            d.sched.step()
    return out, step.computed, step.supervised, computed


# ---------------------------------------------------------------------------------------------------
# the command: options generated from TrainConfig; a YAML file and --set overrides merged under them
# ---------------------------------------------------------------------------------------------------


@settings_command(TrainConfig, exclude=("launch", "vllm"))  # nested: set with --set vllm.url=...
def train_command(
    settings: TrainConfig,
    config: ConfigFile = None,
    overrides: Overrides = None,
    no_resume: bool = typer.Option(False, "--no-resume", help="Start over even if the run has checkpoints."),
) -> None:
    """Train a DFlash drafter for a target on its call records (one process; see `submit` for more).

    Precedence: the options given here, then --set, then the --config file, then the defaults."""
    explicit = {k: getattr(settings, k) for k in settings.model_fields_set}
    cfg = load_or_exit(config, overrides, explicit)
    train(cfg, argv=sys.orig_argv[1:], resume=not no_resume)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m trainer.train [OPTIONS]`` (what ``accelerate launch`` runs): the same command."""
    app = typer.Typer(add_completion=False)
    app.command()(train_command)
    app(args=list(argv) if argv is not None else None, prog_name="python -m trainer.train")


if __name__ == "__main__":
    main()
