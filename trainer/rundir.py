"""The run directory: its name agreed by every rank, the provenance files, ``runs/latest``, the data source."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import typer
import yaml
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list

from records.io import REGENERATED_DIR, parquet_files
from records.storage import is_url
from trainer.config import TrainConfig, run_name
from trainer.data.make_sample import SAMPLE_DIR
from trainer.data.published import HUB_ID, hub_snapshot, sequences_dir


def open_run(acc: Accelerator, cfg: TrainConfig, argv: Sequence[str]) -> tuple[TrainConfig, Path]:
    """(the config with its name fixed, the run directory); the main process writes the provenance."""
    name = run_name(cfg)
    if acc.num_processes > 1:  # every rank must agree on the name the main process picked
        box = [name]
        broadcast_object_list(box, from_process=0)
        name = str(box[0])
    cfg = cfg.model_copy(update={"name": name})
    run_dir = Path(cfg.runs_dir) / name
    if acc.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_provenance(run_dir, cfg, argv)
        point_latest(Path(cfg.runs_dir), run_dir)
    acc.wait_for_everyone()
    return cfg, run_dir


def point_latest(runs_dir: Path, run_dir: Path) -> None:
    """``runs/latest`` -> the newest run (a relative symlink, replaced atomically)."""
    link = runs_dir / "latest"
    tmp = runs_dir / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    tmp.replace(link)


def resolve_data(cfg: TrainConfig) -> str | Path:
    """What to train on: an exported dataset (its `sequences` config; a Hub dataset id is downloaded), else
    call records, else the bundled sample for the target when allowed. A storage URL
    (``s3://bucket/run``: records/storage.py) is read in place by records.io."""
    if is_url(cfg.data):
        return cfg.data
    published = sequences_dir(cfg.data)
    if published is not None:
        _say_unpublished(published.parent.parent)
        return Path(cfg.data)
    if not Path(cfg.data).exists() and HUB_ID.match(cfg.data):
        return hub_snapshot(cfg.data)
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


def _say_unpublished(export: Path) -> None:
    """Re-sampled rows written beside the export after it was made are not in it: say how to publish them."""
    regen, stats = export.parent / REGENERATED_DIR, export / "stats.json"
    if not stats.is_file() or not regen.is_dir():
        return
    newer = [f for f in regen.glob("*.parquet") if f.stat().st_mtime > stats.stat().st_mtime]
    if newer:
        typer.echo(
            f"{regen} has {len(newer)} part(s) newer than the export {export}: they are not trained on "
            f"until it is made again (python -m factory export --data-dir {export.parent}; make regenerate does)"
        )


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
        for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "ACCELERATE_CONFIG_FILE", "SLURM_JOB_ID")
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
