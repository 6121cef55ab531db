"""`python -m trainer export-speculators RUN OUT` and `python -m trainer import-speculators CKPT RUN`."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from lm import load_target
from trainer.dflash.model import DFlashDraftModel
from trainer.speculators.checkpoint import from_speculators
from trainer.speculators.data import export


class ExportSpeculatorsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImportSpeculatorsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_target_layers: int | None = Field(
        None, ge=2, description="The target's depth; default: the checkpoint's, else the run's target."
    )


@settings_command(ExportSpeculatorsSettings)
def export_speculators_command(
    settings: ExportSpeculatorsSettings,
    run_dir: Path = typer.Argument(..., help="A run directory whose data/ was built (runs/<name>)."),
    out_dir: Path = typer.Argument(..., help="A new directory for the datasets folder."),
) -> None:
    """Write a run's built sequences (input_ids, loss_mask, seq_len) as a speculators data folder."""
    meta = export(run_dir, out_dir)
    typer.echo(
        f"wrote {meta['rows']} sequences ({meta['train_rows']} train, then {meta['eval_rows']} held out) to "
        f"{out_dir}; speculators: --data-path {out_dir} --train-data-ratio {meta['train_data_ratio']} "
        f"--total-seq-len {max(meta['max_seq_len'], 1)} (or more: never less, it truncates)"
    )


def _target_depth(run: Path) -> int:
    drafter = run / "drafter" / "config.json"
    if drafter.exists():
        return int(json.loads(drafter.read_text())["num_target_layers"])
    cfg = run / "config.yaml"
    if not cfg.exists():
        raise SystemExit(f"{run} has no config.yaml: pass --num-target-layers")
    return load_target(str(yaml.safe_load(cfg.read_text())["target"])).num_layers


@settings_command(ImportSpeculatorsSettings)
def import_speculators_command(
    settings: ImportSpeculatorsSettings,
    ckpt_dir: Path = typer.Argument(..., help="A speculators DFlash checkpoint directory."),
    run_dir: Path = typer.Argument(
        ..., help="The run whose data it was trained on (its drafter/ is replaced)."
    ),
) -> None:
    """Convert a speculators DFlash checkpoint into RUN/drafter, where `eval` and `export` read it."""
    run = run_dir.resolve()
    cfg = json.loads((ckpt_dir / "config.json").read_text())
    depth = settings.num_target_layers or (cfg.get("dflash_factory") or {}).get("num_target_layers")
    depth = depth or _target_depth(run)
    dest, staged = run / "drafter", run / "drafter.importing"
    shutil.rmtree(staged, ignore_errors=True)  # a half-written import of our own from an earlier failure
    try:
        from_speculators(ckpt_dir, staged, depth)
        drafter = DFlashDraftModel.load(staged)  # the released layout loads as any trained drafter does
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    (staged / "dflash_factory.json").write_text(
        json.dumps(
            {"imported_from": str(ckpt_dir.resolve()), "speculators_version": cfg.get("speculators_version")}
        )
        + "\n"
    )
    if dest.exists():  # nothing stored is lost: the previous drafter is kept beside it
        kept = run / f"drafter.before-import-{time.strftime('%Y%m%d-%H%M%S')}"
        dest.rename(kept)
        typer.echo(f"kept the previous drafter as {kept}")
    staged.rename(dest)
    typer.echo(
        f"imported {ckpt_dir} into {dest}: {drafter.config.num_hidden_layers} layers, block "
        f"{drafter.config.block_size}, taps {drafter.target_layer_ids}; measure it with "
        f"`python -m trainer eval {run_dir}`"
    )
