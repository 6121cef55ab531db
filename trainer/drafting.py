"""The trainable side of a run: the drafter for the target, AdamW and its warmup + cosine schedule,
prepared by accelerate (one process, DDP or FSDP)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from torch import nn

from lm.model import Target
from trainer.checkpoint import Position
from trainer.config import TrainConfig
from trainer.dflash.config import make_draft_config, resolve_mask_token
from trainer.dflash.kinds import KINDS
from trainer.dflash.objective import StepOutput, dflash_loss
from trainer.packed import valid_rows
from trainer.progress import Meter


@dataclass
class Drafting:
    """The trainable side of a run, as accelerate prepared it, and the fixed facts the loop needs."""

    model: nn.Module
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    config: Any  # the drafter's Qwen3Config (with the DFlash fields)
    mask_id: int
    mask_how: str
    layer_ids: list[int]
    micro_per_epoch: int
    total_steps: int
    embed: torch.Tensor  # the target's embedding and LM head weights on the drafter's device (frozen)
    head: torch.Tensor
    kind: str = "dflash"  # trainer.dflash.kinds
    head_weight: float = 1.0
    planned_steps: int = 0  # total_steps as planned, before a time budget cut it short


def frozen_weight(module: nn.Module) -> torch.Tensor:
    """The weight of the target's embedding or LM head (the drafter reads both, frozen)."""
    weight = module.weight
    assert isinstance(weight, torch.Tensor)
    return weight


def shared_weights(target: Target, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's embedding and LM head weights where the drafter trains. A target sharded over GPUs
    (`target_device_map`) keeps its embedding on the first and its head on the last: each is copied to
    the drafter's device once here (a tied pair once), never moved per step."""
    embed, head = frozen_weight(target.embed_tokens), frozen_weight(target.lm_head)
    moved = embed.detach().to(device)
    return moved, moved if head is embed else head.detach().to(device)


def step_loss(
    d: Drafting,
    target: Target,
    step: Any,
    anchors: torch.Tensor,
    *,
    block_size: int,
    weights: Any,
    flex: bool,
) -> StepOutput:
    """The DFlash loss of one packed step (`trainer.packed`) with the target's frozen embedding and head:
    the one call the training loop and the held-out evaluation share. ``anchors`` on the host (as
    ``packed.sample_anchors`` draws them): the label slots are found there, not on the device."""
    return dflash_loss(
        d.model,
        taps=step.taps,
        input_ids=step.input_ids,
        loss_mask=step.loss_mask,
        anchors=anchors.to(step.input_ids.device, non_blocking=True),
        rows=valid_rows(step, anchors, block_size),
        embed_weight=d.embed,
        lm_head_weight=d.head,
        block_size=block_size,
        mask_token_id=d.mask_id,
        weights=weights,
        flex=flex,
        layout=step.layout,
        head_weight=d.head_weight,
        label_ids=step.label_ids,
    )


def kind_config(cfg: TrainConfig, dcfg: Any) -> Any:
    """The DFlash drafter config ``dcfg`` made the one of the kind ``cfg.drafter`` names."""
    return KINDS[cfg.drafter].configure(dcfg, cfg)


def make_drafting(acc: Accelerator, cfg: TrainConfig, target: Target, n_seqs: int) -> Drafting:
    mask_id, how = cfg.mask_token_id, "from the config"
    if mask_id is None:
        if target.tokenizer is None:
            raise ValueError("set mask_token_id: the target has no tokenizer to choose one from")
        mask_id, how = resolve_mask_token(target.tokenizer, frozen_weight(target.embed_tokens).shape[0])
    dcfg = make_draft_config(
        target.model.config,
        num_hidden_layers=cfg.num_layers,
        block_size=cfg.block_size,
        mask_token_id=mask_id,
        target_layer_ids=cfg.target_layer_ids,
        intermediate_size=cfg.intermediate_size,
        num_taps=cfg.num_taps,
    )
    dcfg = kind_config(cfg, dcfg)
    if not KINDS[cfg.drafter].fsdp and acc.distributed_type == DistributedType.FSDP:
        raise ValueError(f"drafter={cfg.drafter} trains on one process or with DDP, not FSDP")
    drafter = KINDS[cfg.drafter].model(dcfg).to(acc.device)
    drafter.checkpoint_layers = cfg.activation_checkpointing
    n_params = sum(p.numel() for p in drafter.parameters())
    acc.print(
        f"drafter: {cfg.drafter}, {cfg.num_layers} layers, {n_params / 1e6:.2f}M parameters, block {cfg.block_size}, "
        f"taps {drafter.target_layer_ids} of {target.num_layers}, mask token {mask_id} ({how})"
    )
    micro_per_epoch = math.ceil(n_seqs / acc.num_processes)
    steps_per_epoch = max(1, math.ceil(micro_per_epoch / cfg.grad_accum))
    total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(total_steps, int(cfg.warmup * total_steps), cfg.min_lr_ratio)
    )
    model, opt, sched = acc.prepare(drafter, opt, sched)
    embed, head = shared_weights(target, acc.device)
    return Drafting(
        model,
        opt,
        sched,
        dcfg,
        mask_id,
        how,
        drafter.target_layer_ids,
        micro_per_epoch,
        total_steps,
        embed,
        head,
        cfg.drafter,
        cfg.head_weight,
    )


def lr_lambda(total: int, warmup: int, min_ratio: float) -> Callable[[int], float]:
    """Linear warmup over ``warmup`` steps, then cosine down to ``min_ratio`` of the peak at ``total``."""

    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return f


def finish(
    acc: Accelerator,
    cfg: TrainConfig,
    run_dir: Path,
    d: Drafting,
    pos: Position,
    meter: Meter,
    elapsed: float,
    n_seqs: int,
    report: dict[str, Any],
) -> None:
    """The drafter in float32 in the released layout, and the run's summary (main process)."""
    state = acc.get_state_dict(d.model)
    if acc.is_main_process:
        final = KINDS[d.kind].model(d.config)
        final.load_state_dict({k: v.float().cpu() for k, v in state.items()})
        final.save(run_dir / "drafter")
        world = acc.num_processes
        summary = {
            "target": cfg.target,
            "steps": pos.step,
            "planned_steps": d.planned_steps or d.total_steps,
            "stopped_by_budget": bool(d.planned_steps and pos.step < d.planned_steps),
            "max_minutes": cfg.max_minutes,
            "sequences": n_seqs,
            "world_size": world,
            "distributed_type": str(acc.distributed_type.value),
            "train_seconds": round(elapsed, 1),
            "target_tokens": meter.tokens * world,  # positions the drafter trained over
            "target_tokens_computed": meter.computed * world,  # target forward positions (shared once)
            "supervised_tokens": meter.supervised * world,
            "target_tokens_per_s": round(meter.tokens * world / max(elapsed, 1e-9), 1),
            "mask_token": {"id": d.mask_id, "how": d.mask_how},
            "target_layer_ids": d.layer_ids,
            "rope_style": "neox",
            "data": report,
        }
        curve = run_dir / "heldout.jsonl"
        if curve.exists():  # the learning curve's last point: the saved drafter's, and its context check
            summary["heldout"] = json.loads(curve.read_text().splitlines()[-1])
        text = json.dumps(summary, indent=2) + "\n"
        (run_dir / "drafter" / "dflash_factory.json").write_text(text)
        (run_dir / "train_summary.json").write_text(text)
        acc.print(
            f"trained {pos.step} steps in {elapsed:.0f}s ({summary['target_tokens_per_s']:.0f} target tokens/s): {run_dir}"
        )
    acc.wait_for_everyone()
    acc.end_training()
