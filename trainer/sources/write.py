"""`python -m trainer write-features RUN OUT`: a run's sequences' taps, stored for the `cache` source.

The taps come from the run config's own `feature_source` (`hf`: the target in-process; `vllm`: a server
with extraction), for the run's built train and held-out sequences, in batches of `--batch` sequences, one
shard each. Re-running skips what the directory already holds, so a killed writer resumes. The size is
estimated first (tokens × taps × hidden × bytes); more than the free space is refused unless `--force`.
Training then reads them with `feature_source: cache` and `feature_dir: OUT`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from standin import Target, load_target
from standin.taps import default_target_layer_ids
from trainer.config import TrainConfig
from trainer.sources import cache as cache_mod
from trainer.sources import make_source


class WriteFeaturesSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch: int = Field(64, ge=1, description="Sequences per shard (and per request batch).")
    force: bool = Field(False, description="Write even when the estimate exceeds the free space.")


def sequences(run: Path) -> list[list[int]]:
    data = run / "data"
    files = [data / f"{split}.parquet" for split in ("train", "eval") if (data / f"{split}.parquet").exists()]
    if not files:
        raise SystemExit(f"no built data in {run} (expected {data / 'train.parquet'})")
    return [
        list(ids)
        for f in files
        for ids in pq.read_table(str(f), columns=["input_ids"])["input_ids"].to_pylist()
    ]


def write_features(
    run_dir: str | Path,
    out_dir: str | Path,
    batch: int = 64,
    force: bool = False,
    target: Target | None = None,
) -> dict[str, Any]:
    """`target`: an already loaded target instead of the run's `target` (tests, benchmarks)."""
    run, out = Path(run_dir).resolve(), Path(out_dir)
    cfg = TrainConfig.validated(yaml.safe_load((run / "config.yaml").read_text()))
    if cfg.feature_source == "cache":
        raise SystemExit("the run reads features from a cache: set feature_source to hf or vllm to write one")
    target = target or load_target(cfg.target)
    taps = cfg.target_layer_ids or default_target_layer_ids(target.num_layers, cfg.num_layers)
    seqs = sequences(run)
    need = sum(len(s) for s in seqs) * len(taps) * target.hidden_size * 4  # float32 as the sources give
    out.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out).free
    typer.echo(
        f"{len(seqs)} sequences, {need / 2**30:.2f} GiB of features ({free / 2**30:.1f} GiB free) -> {out}"
    )
    if need > free and not force:
        raise SystemExit("not enough free space for the features: free some, or pass --force")
    source = make_source(cfg.feature_source, target, vllm=cfg.vllm)
    t0, manifest = time.monotonic(), dict[str, Any]()
    for i in range(0, len(seqs), batch):
        manifest = cache_mod.write(source, seqs[i : i + batch], taps, out)
        done = min(i + batch, len(seqs))
        typer.echo(f"features: {done}/{len(seqs)} sequences, {time.monotonic() - t0:.0f}s")  # plain lines
    return manifest


@settings_command(WriteFeaturesSettings)
def write_features_command(
    settings: WriteFeaturesSettings,
    run_dir: Path = typer.Argument(..., help="A run directory whose data/ was built (runs/<name>)."),
    out_dir: Path = typer.Argument(..., help="The feature directory (created; resumed when it exists)."),
) -> None:
    """Store a run's target taps for training with `feature_source: cache`."""
    manifest = write_features(run_dir, out_dir, settings.batch, settings.force)
    typer.echo(
        f"{len(manifest.get('entries', {}))} sequences stored in {out_dir}; train with "
        f"--set feature_source=cache --set feature_dir={out_dir}"
    )
