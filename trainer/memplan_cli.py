"""`python -m trainer plan-memory`: the planner's table, what to change when it does not fit, and the
largest step sizes that do (trainer/memplan.py predicts; this prints)."""

from __future__ import annotations

import typer
from pydantic import BaseModel, Field

from clikit import settings_command
from trainer.config_cli import ConfigFile, Overrides, load_or_exit
from trainer.memplan import GIB, Plan, largest, plan, target_config


class PlanMemorySettings(BaseModel):
    target: str | None = Field(
        None,
        description="A preset (qwen3-8b, qwen3-32b) or a Hugging Face model folder (its config.json); "
        "default: the run config's target.",
    )
    gpus: int = Field(1, ge=1, description="GPUs the run trains on (FSDP divides the drafter's states).")
    gpu_memory: float = Field(
        79.0,
        gt=0,
        description="GiB a rank may use: an 'H100 80GB' holds 79.6 GiB in all (an H200 139.8), less headroom.",
    )
    search: bool = Field(True, description="Also find the largest step_anchors and max_len that fit.")


def table(p: Plan, budget: float) -> str:
    lines = [f"  {name:<48} {b / GIB:7.2f} GiB" for name, b in p.parts.items()]
    verdict = "fits" if p.total <= budget else "does NOT fit"
    lines.append(
        f"  {'predicted peak per rank':<48} {p.total / GIB:7.2f} GiB  ({verdict} {budget / GIB:g} GiB)"
    )
    return "\n".join(lines)


@settings_command(PlanMemorySettings)
def plan_memory_command(
    settings: PlanMemorySettings,
    config: ConfigFile = None,
    overrides: Overrides = None,
) -> None:
    """Predict a rank's peak GPU memory for a run config and target, by part, before renting a GPU."""
    cfg = load_or_exit(config, overrides)
    try:
        tcfg = target_config(settings.target or cfg.target)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    budget = settings.gpu_memory * GIB
    p = plan(cfg, tcfg, settings.gpus)
    typer.echo(
        f"plan-memory: {settings.target or cfg.target}, {settings.gpus} GPU(s) of {settings.gpu_memory:g} GiB"
    )
    typer.echo(table(p, budget))
    if p.total > budget and not cfg.activation_checkpointing:
        cfg = cfg.model_copy(update={"activation_checkpointing": True})
        p = plan(cfg, tcfg, settings.gpus)
        typer.echo("with activation_checkpointing: true (recommended: set it in the config)")
        typer.echo(table(p, budget))
    if settings.search:
        anchors = largest(cfg, tcfg, "step_anchors", budget, settings.gpus)
        length = largest(cfg, tcfg, "max_len", budget, settings.gpus)
        typer.echo(f"largest step_anchors at max_len {cfg.max_len}: {anchors}")
        typer.echo(f"largest max_len at step_anchors {cfg.step_anchors}: {length}")
    if p.total > budget:
        raise typer.Exit(1)
