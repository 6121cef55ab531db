"""Train a DFlash drafter on a target's own traffic. Reads top to bottom:

1. the run config (one YAML file + ``key=value`` overrides) and the run directory it writes to;
2. the frozen target (its embeddings, LM head and tapped hidden states feed the drafter);
3. the training sequences, built from the call records (``trainer.data``);
4. the drafter, AdamW, warmup + cosine, prepared by ``accelerate`` (one process, DDP or FSDP);
5. the loop: per sequence one target forward (no grad) gives the features, many anchored blocks share
   it, weighted block cross-entropy, grad clip; checkpoints, resume, save on SIGTERM, a progress bar
   with loss and per-position accuracy;
6. the final drafter in the released DFlash layout (``drafter/``), ready for ``eval`` and ``export``.

Run: ``python -m trainer train --config trainer/configs/cpu.yaml`` or, on GPUs,
``accelerate launch --config_file trainer/configs/accelerate/ddp.yaml -m trainer.train --config ...``
(``python -m trainer submit`` renders exactly that for local, Slurm and Kubernetes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
import yaml

# ---------------------------------------------------------------------------------------------------
# 1. Run config
# ---------------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    # what to train for, on what
    target: str = "smollm2"  # smollm2, tiny-qwen3, or a Hugging Face model directory
    data: str = (
        "data"  # call records: DATA_DIR (its dataset/ export or calls/), a calls/ dir, a file, an export
    )
    sample_fallback: bool = False  # no records under `data`: use the bundled sample for the target
    model_filter: str | None = None  # keep only calls whose `model` column equals this
    runs_dir: str = "runs"
    name: str | None = None  # default: <date>-<time>-<target>
    # the drafter (defaults: the released Qwen3-8B drafter's shape)
    num_layers: int = 5
    block_size: int = 16
    target_layer_ids: list[int] | None = None  # default: spread from 1 to n-3, one per drafter layer
    mask_token_id: int | None = None  # default: trainer.dflash.config.resolve_mask_token
    intermediate_size: int | None = None  # default: the target's
    # data
    max_len: int = 3072
    eval_fraction: float = 0.1
    # optimisation (the DFlash paper's recipe)
    epochs: float = 6.0
    lr: float = 6e-4
    warmup: float = 0.04  # fraction of the optimizer steps
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    anchors: int = 512  # anchored blocks per sequence, all sharing one target forward
    gamma: float | None = None  # default: 7 for B=16, 5 for B=10, 4 for B=8
    grad_accum: int = 1
    max_steps: int | None = None  # stop after this many optimizer steps (overrides epochs)
    seed: int = 0
    mixed_precision: str = "auto"  # auto: bf16 on GPU, float32 on CPU; or no | bf16 | fp16
    cache_features: bool = False  # keep each sequence's target features in RAM after its first epoch
    # bookkeeping
    save_every: int = 0  # optimizer steps between checkpoints (0: at the end of each epoch only)
    keep_checkpoints: int = 2
    log_every: int = 1
    # what `python -m trainer eval` does with this run by default
    eval_prompts: int = 8
    eval_max_new_tokens: int = 64
    eval_max_prompt_len: int = 2048
    # launch settings for `python -m trainer submit` (not used by training itself)
    launch: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
        values: dict[str, Any] = {}
        if path is not None:
            values = yaml.safe_load(Path(path).read_text()) or {}
        for item in overrides:
            key, sep, raw = item.partition("=")
            if not sep:
                raise ValueError(f"override {item!r} is not key=value")
            *parents, leaf = key.strip().split(".")  # launch.nodes=2 sets one nested key
            node = values
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = yaml.safe_load(raw)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        hints = typing.get_type_hints(cls)
        for key, value in values.items():  # YAML 1.1 reads 1e-4 as a string
            if isinstance(value, str) and float in (hints[key], *typing.get_args(hints[key])):
                values[key] = float(value)
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_name(cfg: TrainConfig) -> str:
    return cfg.name or f"{time.strftime('%Y%m%d-%H%M%S')}-{Path(cfg.target).name}"


def point_latest(runs_dir: Path, run_dir: Path) -> None:
    """``runs/latest`` -> the newest run (a relative symlink, replaced atomically)."""
    link = runs_dir / "latest"
    tmp = runs_dir / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    tmp.replace(link)


def resolve_data(cfg: TrainConfig) -> Path:
    """The call records to train on; the bundled sample for the target when allowed and there are none."""
    from trainer.data.make_sample import SAMPLE_DIR
    from trainer.data.records import parquet_files

    try:
        parquet_files(cfg.data)
        return Path(cfg.data)
    except FileNotFoundError:
        sample = SAMPLE_DIR / Path(cfg.target).name
        if not cfg.sample_fallback or not sample.is_dir():
            raise
        typer.echo(
            f"no call records under {cfg.data} yet (run `make harvest`): using the bundled sample {sample}"
        )
        return sample


def write_provenance(run_dir: Path, cfg: TrainConfig, argv: Sequence[str]) -> None:
    """The exact command, environment facts and resolved config, next to the run."""
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.as_dict(), sort_keys=False))
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    env = {
        k: os.environ[k]
        for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "ACCELERATE_CONFIG_FILE")
        if k in os.environ
    }
    lines = [
        "# the command that produced this run",
        " ".join(shlex.quote(a) for a in [sys.executable, *argv]),
        f"# cwd: {Path.cwd()}",
        f"# git: {commit or 'unknown'}",
        f"# env: {json.dumps(env)}",
    ]
    (run_dir / "command.txt").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------------
# 5. helpers of the loop (checkpoints, schedule, progress)
# ---------------------------------------------------------------------------------------------------


def lr_lambda(total: int, warmup: int, min_ratio: float):  # type: ignore[no-untyped-def]
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return f


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    ckpts = [c for c in ckpts if (c / "trainer_state.json").exists()]
    return ckpts[-1] if ckpts else None


class Progress:
    """A rich progress bar with loss, per-position accuracy and throughput (main process only); on a
    non-terminal (a log file, CI) one line every 10 seconds instead."""

    def __init__(self, total: int, start: int, block_size: int, enabled: bool) -> None:
        self.enabled = enabled
        self.total = total
        self.show = min(block_size - 1, 6)
        self._bar: Any = None
        self._last_log = 0.0
        if enabled and sys.stdout.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

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

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


# ---------------------------------------------------------------------------------------------------
# the run, top to bottom
# ---------------------------------------------------------------------------------------------------


def train(cfg: TrainConfig, argv: Sequence[str] = (), resume: bool = True, target: Any = None) -> Path:
    """Run (or resume) the training described by ``cfg``; returns the run directory. ``target``: an
    already loaded ``standin.Target`` instead of loading ``cfg.target`` (tests, benchmarks)."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from standin import load_target
    from trainer.data import build as data_build
    from trainer.dflash import helpers as H
    from trainer.dflash.config import make_draft_config, resolve_mask_token
    from trainer.dflash.model import DFlashDraftModel
    from trainer.dflash.objective import dflash_loss, use_flex_attention

    # 1. run directory ------------------------------------------------------------------------------
    mp = cfg.mixed_precision
    if mp == "auto":
        mp = "bf16" if torch.cuda.is_available() else "no"
    acc = Accelerator(
        mixed_precision=mp,
        gradient_accumulation_steps=cfg.grad_accum,
        step_scheduler_with_optimizer=False,
        cpu=not torch.cuda.is_available(),  # several CPU processes (torchrun) then train as DDP over gloo
    )
    runs_dir = Path(cfg.runs_dir)
    name = run_name(cfg)
    if acc.num_processes > 1:  # every rank must agree on the name the main process picked
        name = _broadcast_str(acc, name)
    run_dir = runs_dir / name
    if acc.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = dataclasses.replace(cfg, name=name)
        write_provenance(run_dir, cfg, argv)
        point_latest(runs_dir, run_dir)
    acc.wait_for_everyone()
    cfg = dataclasses.replace(cfg, name=name)
    set_seed(cfg.seed)
    log = acc.print

    # 2. the frozen target ----------------------------------------------------------------------------
    if target is None:
        target = load_target(cfg.target)
    tdtype = torch.bfloat16 if mp == "bf16" else torch.float32
    target.model.to(acc.device, dtype=tdtype)
    target.model.requires_grad_(False)
    embed_w = target.embed_tokens.weight
    head_w = target.lm_head.weight

    # 3. training sequences ---------------------------------------------------------------------------
    data_dir = run_dir / "data"
    with acc.main_process_first():
        if acc.is_main_process and not (data_dir / "report.json").exists():
            source = resolve_data(cfg)
            built = data_build.build(
                target, source, max_len=cfg.max_len, eval_fraction=cfg.eval_fraction, model=cfg.model_filter
            )
            built.report["source"] = str(source)
            data_build.write(built, data_dir)
    report = json.loads((data_dir / "report.json").read_text())
    seqs = data_build.read(data_dir / "train.parquet")
    if not seqs:
        raise SystemExit(f"no training sequences from {cfg.data}: see {data_dir / 'report.json'}")
    log(
        f"data: {report['records']['rows']} records, {report['records']['kept']} kept "
        f"(excluded: {report['records']['excluded'] or 'none'}); {report['calls']} calls -> "
        f"{report['merge']['sequences']} sequences (target tokens x{report['merge']['reduction']} fewer); "
        f"train {len(seqs)} / eval {report['split']['eval']['sequences']} sequences"
    )

    # 4. drafter, optimizer, schedule -----------------------------------------------------------------
    mask_id = cfg.mask_token_id
    how = "from the config"
    if mask_id is None:
        if target.tokenizer is None:
            raise ValueError("set mask_token_id: the target has no tokenizer to choose one from")
        mask_id, how = resolve_mask_token(target.tokenizer, embed_w.shape[0])
    dcfg = make_draft_config(
        target.model.config,
        num_hidden_layers=cfg.num_layers,
        block_size=cfg.block_size,
        mask_token_id=mask_id,
        target_layer_ids=cfg.target_layer_ids,
        intermediate_size=cfg.intermediate_size,
    )
    drafter = DFlashDraftModel(dcfg).to(acc.device)
    n_params = sum(p.numel() for p in drafter.parameters())
    log(
        f"drafter: {cfg.num_layers} layers, {n_params / 1e6:.2f}M parameters, block {cfg.block_size}, "
        f"taps {drafter.target_layer_ids} of {target.num_layers}, mask token {mask_id} ({how})"
    )
    world = acc.num_processes
    micro_per_epoch = math.ceil(len(seqs) / world)
    steps_per_epoch = max(1, math.ceil(micro_per_epoch / cfg.grad_accum))
    total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(total_steps, int(cfg.warmup * total_steps), cfg.min_lr_ratio)
    )
    model, opt, sched = acc.prepare(drafter, opt, sched)

    # resume ------------------------------------------------------------------------------------------
    step = 0
    micro = 0  # sequences consumed by this rank
    synced_micro = 0  # ... as of the last optimizer step (what a checkpoint records)
    ckpt = latest_checkpoint(run_dir) if resume else None
    if ckpt is not None:
        acc.load_state(str(ckpt))
        state = json.loads((ckpt / "trainer_state.json").read_text())
        step, micro = int(state["step"]), int(state["micro"])
        synced_micro = micro
        log(f"resumed from {ckpt} at step {step}")

    # SIGTERM: finish the step, checkpoint, exit -------------------------------------------------------
    stop = {"signal": 0}

    def on_term(signum: int, _frame: Any) -> None:
        stop["signal"] = signum

    previous_handler = signal.signal(signal.SIGTERM, on_term)

    def save_checkpoint() -> Path:
        path = run_dir / "checkpoints" / f"step-{step}"
        acc.save_state(str(path))
        if acc.is_main_process:
            state = {"step": step, "micro": synced_micro, "time": time.time()}
            (path / "trainer_state.json").write_text(json.dumps(state))
            old = sorted((run_dir / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
            for p in old[: -cfg.keep_checkpoints]:
                _rmtree(p)
        acc.wait_for_everyone()
        return path

    # 5. the loop --------------------------------------------------------------------------------------
    b = cfg.block_size
    weights = H.loss_weights(b, cfg.gamma or H.default_gamma(b), device=acc.device)
    flex = use_flex_attention(acc.device)
    layer_ids = drafter.target_layer_ids
    features: dict[int, Any] = {}
    progress = Progress(total_steps, step, b, enabled=acc.is_main_process)
    metrics_path = run_dir / "metrics.jsonl"
    correct = torch.zeros(b - 1, device=acc.device)
    total = torch.zeros(b - 1, device=acc.device)
    losses: list[float] = []
    tokens = 0
    supervised = 0
    t0 = time.monotonic()
    model.train()
    try:
        while step < total_steps and not stop["signal"]:
            epoch, index = divmod(micro, micro_per_epoch)
            order = torch.randperm(
                len(seqs), generator=torch.Generator().manual_seed(cfg.seed + epoch)
            ).tolist()
            pick = order[(index * world + acc.process_index) % len(seqs)]
            seq = seqs[pick]
            ids = torch.tensor(seq.input_ids, dtype=torch.long, device=acc.device)
            mask = torch.tensor(seq.loss_mask, dtype=torch.long, device=acc.device)
            with torch.no_grad():
                taps = features.get(pick)
                if taps is None:
                    taps = target.tap(ids[None], layer_ids)
                    if cfg.cache_features:
                        features[pick] = taps
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + micro * 131 + acc.process_index)
            anchors = H.sample_anchors(mask.cpu(), cfg.anchors, gen).to(acc.device)
            with acc.accumulate(model):
                out = dflash_loss(
                    model,
                    taps=taps,
                    input_ids=ids,
                    loss_mask=mask,
                    anchors=anchors,
                    embed_weight=embed_w,
                    lm_head_weight=head_w,
                    block_size=b,
                    mask_token_id=mask_id,
                    weights=weights,
                    flex=flex,
                )
                acc.backward(out.loss)
                if acc.sync_gradients and cfg.grad_clip:
                    acc.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                opt.zero_grad(set_to_none=True)
            micro += 1
            correct += out.correct
            total += out.total
            losses.append(float(out.loss.detach()))
            tokens += ids.numel()
            supervised += int(mask.sum())
            if not acc.sync_gradients:
                continue
            sched.step()
            step += 1
            synced_micro = micro
            if world > 1:
                stop["signal"] = int(_any_rank(acc, stop["signal"]))
            if step % cfg.log_every == 0 or step == total_steps:
                c, t = acc.reduce(correct, "sum"), acc.reduce(total, "sum")
                acc_pos = (c / t.clamp_min(1)).tolist()
                loss = sum(losses) / len(losses)
                elapsed = time.monotonic() - t0
                rec = {
                    "step": step,
                    "epoch": round(micro / micro_per_epoch, 3),
                    "loss": round(loss, 5),
                    "lr": sched.get_last_lr()[0],
                    "acc": [round(a, 4) for a in acc_pos],
                    "tau_teacher_forced": round(float(H.acceptance_from_accuracy(c, t)), 3),
                    "tokens": tokens * world,
                    "elapsed_s": round(elapsed, 1),
                }
                if acc.is_main_process:
                    with metrics_path.open("a") as fh:
                        fh.write(json.dumps(rec) + "\n")
                progress.update(step, loss, acc_pos, tokens * world / max(elapsed, 1e-9))
                correct.zero_()
                total.zero_()
                losses.clear()
            at_epoch_end = micro % micro_per_epoch == 0
            if (cfg.save_every and step % cfg.save_every == 0) or (at_epoch_end and not cfg.save_every):
                save_checkpoint()
    finally:
        progress.close()
        signal.signal(signal.SIGTERM, previous_handler)
    elapsed = time.monotonic() - t0

    if stop["signal"]:
        path = save_checkpoint()
        log(f"signal {stop['signal']}: saved {path}; resume with --set name={name}")
        raise SystemExit(128 + stop["signal"])

    # 6. the drafter, in the released layout ------------------------------------------------------------
    save_checkpoint()
    acc.wait_for_everyone()
    state = acc.get_state_dict(model)
    if acc.is_main_process:
        final = DFlashDraftModel(dcfg)
        final.load_state_dict({k: v.float().cpu() for k, v in state.items()})
        final.save(run_dir / "drafter")
        summary = {
            "target": cfg.target,
            "steps": step,
            "sequences": len(seqs),
            "world_size": world,
            "train_seconds": round(elapsed, 1),
            "target_tokens": tokens * world,
            "supervised_tokens": supervised * world,
            "target_tokens_per_s": round(tokens * world / max(elapsed, 1e-9), 1),
            "mask_token": {"id": mask_id, "how": how},
            "target_layer_ids": layer_ids,
            "rope_style": "neox",
            "data": report,
        }
        (run_dir / "drafter" / "dflash_factory.json").write_text(json.dumps(summary, indent=2) + "\n")
        (run_dir / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        log(
            f"trained {step} steps in {elapsed:.0f}s ({summary['target_tokens_per_s']:.0f} target tokens/s): {run_dir}"
        )
    acc.wait_for_everyone()
    acc.end_training()
    return run_dir


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _broadcast_str(acc: Any, value: str) -> str:
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box, from_process=0)
    return str(box[0])


def _any_rank(acc: Any, flag: int) -> int:
    import torch

    t = torch.tensor([flag], device=acc.device)
    return int(acc.reduce(t, "max").item())


def train_command(
    config: Path | None = typer.Option(
        None, "--config", "-c", help="A run config YAML (trainer/configs/*.yaml)."
    ),
    overrides: list[str] = typer.Option([], "--set", help="Override one config key: key=value (YAML value)."),
    no_resume: bool = typer.Option(False, "--no-resume", help="Start over even if the run has checkpoints."),
) -> None:
    """Train a DFlash drafter for a target on its call records (one process; see `submit` for more)."""
    cfg = TrainConfig.load(config, overrides)
    argv = ["-m", "trainer", "train", *(["--config", str(config)] if config else [])]
    argv += [a for o in overrides for a in ("--set", o)] + (["--no-resume"] if no_resume else [])
    train(cfg, argv=argv, resume=not no_resume)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m trainer.train --config FILE [--set key=value ...] [--no-resume]`` (used by accelerate launch)."""
    import argparse

    args = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m trainer.train")
    p.add_argument("--config", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--no-resume", action="store_true")
    ns = p.parse_args(args)
    cfg = TrainConfig.load(ns.config, ns.overrides)
    train(cfg, argv=["-m", "trainer.train", *args], resume=not ns.no_resume)


if __name__ == "__main__":
    main()
