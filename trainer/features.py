"""`python -m trainer features`: the frozen target run once over the training data, stored for `train`.

The data is built exactly as `train` builds it (same config, same `data/` split), cut into the same units
(`trainer.data.units`: a session's sequences, each sharing its longest common prefix with the one before),
and the target runs once per unit, continuing its KV cache across the unit's segments — so each shared
prefix is computed and stored once (`trainer.sources.cache`, version 2). Units are grouped into shards of
about `--batch` target tokens; the shard list is a pure function of the data, so under `accelerate launch`
or torchrun each rank writes its own share of shards (largest first to the least loaded rank), then rank 0
merges their metadata into the manifest after a barrier. A shard is written to a temporary and renamed: a
killed run resumes by skipping every shard that exists (checked to be of the same plan) and never writes
one twice. The size is printed first and refused past the free space without `--force`.

Train from it with `--set feature_source=cache --set feature_dir=OUT`: the trainer then loads only the
target's `embed_tokens` and `lm_head` (`lm.loading.load_shared_weights`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import typer
import yaml
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from lm import load_target
from lm.loading import load_shared_weights
from lm.model import Target
from records.atomic import leftovers
from trainer.config import TrainConfig
from trainer.config_cli import ConfigFile, Overrides, load_or_exit
from trainer.data import build as data_build
from trainer.data.units import Unit, session_units
from trainer.dflash.helpers import default_target_layer_ids
from trainer.packed import TapsFn, unit_features
from trainer.ranks import accelerator
from trainer.sources import cache
from trainer.sources.base import step_taps
from trainer.sources.select import SOURCES, kind_of, make_source
from trainer.train import training_data

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
Dtype = Literal["bfloat16", "float16", "float32"]


class WriteFeaturesSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch: int = Field(
        32768, ge=1, description="Target tokens per shard (whole units; a larger unit is a shard of its own)."
    )
    dtype: Dtype = Field("bfloat16", description="The target's dtype for the forwards, and the features'.")
    force: bool = Field(False, description="Write even when the estimate exceeds the free space.")


class FeaturesSettings(WriteFeaturesSettings):
    out: Path = Field(..., description="The feature directory (created; a killed run resumes in it).")


@dataclass
class Shard:
    name: str
    units: list[Unit]
    plan: str  # fingerprint of what it holds: a shard on disk of another plan is refused, never reused

    @property
    def tokens(self) -> int:
        return sum(u.computed for u in self.units)


def plan_shards(
    units: Sequence[Unit], batch: int, layer_ids: Sequence[int], dtype: str, target: str = ""
) -> list[Shard]:
    """Whole units in order, a new shard when the next one would pass `batch` target tokens. `target`:
    the target's fingerprint, so a shard written for another target (or its RoPE) is not taken as done."""
    groups: list[list[Unit]] = []
    for u in units:
        if not groups or (groups[-1] and sum(x.computed for x in groups[-1]) + u.computed > batch):
            groups.append([])
        groups[-1].append(u)
    shards = []
    for i, group in enumerate(groups):
        what = [
            list(layer_ids),
            dtype,
            *([target] if target else []),
            [[cache.key(s.seq.input_ids), s.shared] for u in group for s in u.segments],
        ]
        plan = hashlib.sha256(json.dumps(what).encode()).hexdigest()
        shards.append(Shard(cache.shard_name(i, len(groups)), group, plan))
    return shards


def assign(shards: Sequence[Shard], world: int) -> list[list[int]]:
    """Each rank's shard indices: largest first to the least loaded rank (deterministic on every rank)."""
    load, mine = [0] * world, [list[int]() for _ in range(world)]
    for i in sorted(range(len(shards)), key=lambda i: (-shards[i].tokens, i)):
        r = min(range(world), key=lambda r: (load[r], r))
        mine[r].append(i)
        load[r] += shards[i].tokens
    return [sorted(m) for m in mine]


def stored_segments(
    target: Target,
    units: Sequence[Unit],
    layer_ids: list[int],
    device: torch.device,
    taps_fn: Callable[[Unit], TapsFn] | None,
) -> list[cache.Stored]:
    """The shard's segments: one target pass per unit (its KV cache continued), split per segment."""
    out: list[cache.Stored] = []
    for unit in units:
        fn = taps_fn(unit) if taps_fn else None
        feats = unit_features(target, unit, layer_ids, device, fn)[0].cpu()
        at, first = 0, len(out)
        for k, seg in enumerate(unit.segments):
            prev = first + k - 1 if k else None
            rows = feats[at : at + seg.computed]
            out.append(cache.Stored(seg.seq.input_ids, seg.seq.loss_mask, seg.shared, prev, rows))
            at += seg.computed
    return out


def server_taps(cfg: TrainConfig, target: Target, layer_ids: list[int]) -> Callable[[Unit], TapsFn] | None:
    """With a source that is not the target in-process (`vllm`), each unit's taps asked of it in one batch
    (None: in-process)."""
    if kind_of(cfg.feature_source).in_process:
        return None
    source = make_source(cfg.feature_source, target, vllm=cfg.vllm)

    def unit_taps(unit: Unit) -> TapsFn:
        segs = unit.segments
        return step_taps(source, [s.seq.input_ids for s in segs], layer_ids, [s.shared for s in segs])

    return unit_taps


def check_space(
    acc: Accelerator, out: Path, shards: list[Shard], todo: list[Shard], per_token: int, force: bool
) -> None:
    """Print the estimate (rank 0) and refuse, on every rank alike, when it exceeds the free space."""
    need = sum(s.tokens for s in todo) * per_token
    free = shutil.disk_usage(out).free
    total = sum(s.tokens for s in shards)
    unshared = sum(len(seg.seq.input_ids) for s in shards for u in s.units for seg in u.segments)
    acc.print(
        f"features: {total:,} target tokens ({unshared:,} without prefix sharing) x {per_token:,} bytes = "
        f"{total * per_token / 2**30:.2f} GiB in {len(shards)} shards; {len(shards) - len(todo)} already "
        f"written; {need / 2**30:.2f} GiB to write, {free / 2**30:.1f} GiB free in {out}"
    )
    refuse = [need > free and not force]
    if acc.num_processes > 1:  # rank 0's disk reading decides for all, so no rank waits alone at a barrier
        broadcast_object_list(refuse, from_process=0)
    if refuse[0]:
        raise SystemExit(
            f"not enough free space in {out} for the features ({need / 2**30:.2f} GiB needed, "
            f"{free / 2**30:.2f} GiB free): free some, choose another --out, or pass --force to write anyway"
        )


def features(
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    batch: int = 32768,
    dtype: str = "bfloat16",
    force: bool = False,
    data_dir: str | Path | None = None,
    target: Target | None = None,
) -> dict[str, Any]:
    """Write the features of `cfg`'s training data (built into OUT/data, or read from `data_dir`) to
    `out_dir`; returns the manifest (rank 0) with `written`/`skipped`, this rank's shard counts.
    `target`: an already loaded target instead of `cfg.target` (tests, benchmarks)."""
    if kind_of(cfg.feature_source).from_files:
        writers = [n for n, k in SOURCES.items() if not k.from_files]
        raise SystemExit(
            f"feature_source is {cfg.feature_source}: features are written from {' or '.join(writers)}"
        )
    acc = accelerator(cfg)
    if cfg.target_device_map is not None and acc.num_processes > 1:
        raise SystemExit("target_device_map shards one target over the GPUs: run one process, not several")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the data build and the estimate need only the tokenizer, the config and the shared weights: a target
    # of any size is refused for space in seconds, before its layers are read (and not at all when done)
    light = target is None and Path(cfg.target).is_dir()
    if light:
        target = load_shared_weights(cfg.target, dtype=DTYPES[dtype], device=acc.device)
    else:
        target = load(cfg, acc, DTYPES[dtype], target)
    seqs = sequences(acc, cfg, out, data_dir, target)
    layer_ids = list(cfg.target_layer_ids or default_target_layer_ids(target.num_layers, cfg.num_layers))
    units = [u for split in seqs for u in session_units(split, share=cfg.prefix_sharing)]
    shards = plan_shards(units, batch, layer_ids, dtype, target.fingerprint)
    todo = [s for s in shards if not done(out / s.name, s)]
    per_token = len(layer_ids) * target.hidden_size * DTYPES[dtype].itemsize
    check_space(acc, out, shards, todo, per_token, force)
    taps_fn = server_taps(cfg, target, layer_ids)
    assigned = [shards[i] for i in assign(shards, acc.num_processes)[acc.process_index]]
    pending = {s.name for s in todo}
    mine = [s for s in assigned if s.name in pending]
    if light and taps_fn is None and mine:
        target = load(cfg, acc, DTYPES[dtype], None)  # the whole target: this rank computes
    for n, shard in enumerate(mine, 1):
        for stale in leftovers(out / shard.name):  # a killed run's (this shard is this rank's alone)
            stale.unlink(missing_ok=True)
        t0 = time.monotonic()
        segments = stored_segments(target, shard.units, layer_ids, acc.device, taps_fn)
        cache.write_shard(out / shard.name, segments, layer_ids, shard.plan, acc.process_index)
        typer.echo(  # one plain line per shard and rank (a log file, a Slurm output)
            f"[rank {acc.process_index}] {shard.name}: {shard.tokens:,} tokens in "
            f"{time.monotonic() - t0:.0f}s, {n}/{len(mine)} of this rank's shards to write"
        )
    acc.wait_for_everyone()
    manifest: dict[str, Any] = {}
    if acc.is_main_process:
        provenance = {
            "target": cfg.target,
            "target_fingerprint": target.fingerprint,
            "data": cfg.data,
            "prefix_sharing": cfg.prefix_sharing,
        }
        manifest = cache.write_manifest(out, [s.name for s in shards], layer_ids, config=provenance)
    acc.wait_for_everyone()
    return {**manifest, "written": len(mine), "skipped": len(assigned) - len(mine)}


def done(path: Path, shard: Shard) -> bool:
    """A finished shard (renamed into place, so whole) of this plan; one of another plan is refused."""
    if not path.exists():
        return False
    if cache.shard_metadata(path).get("plan") != shard.plan:
        raise SystemExit(
            f"{path} was written for other data or settings (target, tap ids, dtype, batch): use a new --out"
        )
    return True


def load(cfg: TrainConfig, acc: Accelerator, dtype: torch.dtype, target: Target | None) -> Target:
    """The whole target straight onto this rank's device in `dtype` (no float32 CPU copy), or sharded
    over the GPUs with `target_device_map`."""
    if target is not None:
        target.model.to(acc.device, dtype=dtype)
    else:
        target = load_target(cfg.target, dtype=dtype, device=acc.device, device_map=cfg.target_device_map)
    target.model.requires_grad_(False)
    return target


def sequences(
    acc: Accelerator, cfg: TrainConfig, out: Path, data_dir: str | Path | None, target: Target
) -> list[list[data_build.Sequence]]:
    """[train, eval] sequences: built into OUT/data the way `train` builds a run's data, or an existing run's."""
    if data_dir is None:
        training_data(acc, cfg, out, target)  # the main process builds once; a resumed run re-reads it
        data_dir = out / "data"
    data = Path(data_dir)
    if not (data / "train.parquet").exists():
        raise SystemExit(f"no built data in {data} (expected {data / 'train.parquet'})")
    return [
        data_build.read(data / f"{s}.parquet") for s in ("train", "eval") if (data / f"{s}.parquet").exists()
    ]


def summary_line(manifest: dict[str, Any], out: Path) -> str:
    return (
        f"{len(manifest['entries'])} sequences, {manifest['tokens']:,} stored positions in "
        f"{len(manifest['shards'])} shards in {out}; train with --set feature_source=cache --set feature_dir={out}"
    )


@settings_command(FeaturesSettings)
def features_command(
    settings: FeaturesSettings,
    config: ConfigFile = None,
    overrides: Overrides = None,
) -> None:
    """Run the target once over the training data and store its taps for `feature_source: cache`."""
    cfg = load_or_exit(config, overrides)
    result = features(cfg, settings.out, batch=settings.batch, dtype=settings.dtype, force=settings.force)
    if result.get("entries") is not None:
        typer.echo(summary_line(result, settings.out))


@settings_command(WriteFeaturesSettings)
def write_features_command(
    settings: WriteFeaturesSettings,
    run_dir: Path = typer.Argument(..., help="A run directory whose data/ was built (runs/<name>)."),
    out_dir: Path = typer.Argument(..., help="The feature directory (created; resumed when it exists)."),
) -> None:
    """`features` for an existing run: its config.yaml and its built data/ (the same files and format)."""
    cfg = TrainConfig.validated(yaml.safe_load((run_dir / "config.yaml").read_text()))
    result = features(
        cfg,
        out_dir,
        batch=settings.batch,
        dtype=settings.dtype,
        force=settings.force,
        data_dir=run_dir / "data",
    )
    if result.get("entries") is not None:
        typer.echo(summary_line(result, out_dir))
