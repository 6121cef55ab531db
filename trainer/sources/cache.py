"""`cache`: features written ahead of training (`python -m trainer features`), read back by token ids.

Layout of a feature directory (this module's format, version 2):

    shard-NNNNN-of-MMMMM.safetensors   one per batch of units; written to a hidden temporary then renamed, so a
        file that exists is whole. Tensors, per stored segment j: `j.taps` [T_j − shared_j, n·H] (the
        target's dtype), `j.ids` [T_j] int32, `j.mask` [T_j] uint8 (the loss mask). Its metadata says
        everything else: `segments` (JSON: key, length, shared, prev), `plan` (what it was written for),
        `layer_ids`, `hidden_size`, `dtype`, `rank` (the process that wrote it).
    manifest.json   the union of the shards' metadata, written by one process once every shard exists:
        {"format", "version", "layer_ids", "hidden_size", "dtype", "shards": [{"file", "segments"}, ...],
         "entries": {KEY: [shard, j]}, "tokens": stored positions}

A segment is one sequence of a training unit (`trainer.data.units`): its first `shared` positions are
the same as those of segment `prev` of the same shard (a session's calls share their history), so only
the rest is stored — each shared prefix once. A sequence's features are rebuilt along that chain. KEY is
the SHA-256 of the sequence's int64 token ids, so a reader needs nothing but the ids.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from records.atomic import atomic_path, write_text
from trainer.sources.base import FeatureError, FeatureSource, taps_via_many

FORMAT, VERSION, MANIFEST = "dflash-factory-features", 2, "manifest.json"


def key(ids: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(list(ids), dtype=np.int64).tobytes()).hexdigest()


def shard_name(index: int, count: int) -> str:
    return f"shard-{index:05d}-of-{count:05d}.safetensors"


@dataclass
class Stored:
    """One segment as a shard stores it: `taps` covers positions shared.. of `ids`; positions before
    `shared` are segment `prev`'s (an earlier segment of the same shard)."""

    ids: list[int]
    mask: list[int]
    shared: int
    prev: int | None
    taps: torch.Tensor  # [len(ids) - shared, n·H]


def write_shard(
    path: Path, segments: Sequence[Stored], layer_ids: Sequence[int], plan: str, rank: int
) -> None:
    """Write one shard atomically (`records.atomic`: a killed writer leaves no partial shard)."""
    tensors: dict[str, torch.Tensor] = {}
    meta = []
    for j, s in enumerate(segments):
        if s.taps.shape[0] != len(s.ids) - s.shared:
            raise FeatureError(
                f"segment {j}: {s.taps.shape[0]} feature rows for {len(s.ids) - s.shared} positions"
            )
        # a copy: segments are often views of one unit's tensor, and safetensors refuses shared storage
        tensors[f"{j}.taps"] = s.taps.detach().cpu().clone()
        tensors[f"{j}.ids"] = torch.tensor(s.ids, dtype=torch.int32)
        tensors[f"{j}.mask"] = torch.tensor(s.mask, dtype=torch.uint8)
        meta.append({"key": key(s.ids), "length": len(s.ids), "shared": s.shared, "prev": s.prev})
    width = segments[0].taps.shape[-1] if segments else 0
    metadata = {
        "segments": json.dumps(meta),
        "plan": plan,
        "layer_ids": json.dumps(list(layer_ids)),
        "hidden_size": str(width // max(1, len(layer_ids))),
        "dtype": str(segments[0].taps.dtype).removeprefix("torch.") if segments else "",
        "rank": str(rank),
    }
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def shard_metadata(path: Path) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def write_manifest(
    root: Path, names: Sequence[str], layer_ids: Sequence[int], **extra: Any
) -> dict[str, Any]:
    """Merge the shards' metadata into `manifest.json` (atomically); every shard must exist."""
    missing = [n for n in names if not (root / n).exists()]
    if missing:
        raise FeatureError(f"{root}: {len(missing)} shards not written yet (first: {missing[0]}); run again")
    shards, entries, tokens = [], dict[str, list[int]](), 0
    dtype, hidden = "", 0
    for i, name in enumerate(names):
        meta = shard_metadata(root / name)
        if json.loads(meta["layer_ids"]) != list(layer_ids):
            raise FeatureError(f"{root / name} holds taps {meta['layer_ids']}, not {list(layer_ids)}")
        segments = json.loads(meta["segments"])
        shards.append({"file": name, "segments": segments, "rank": int(meta["rank"])})
        for j, s in enumerate(segments):
            entries.setdefault(s["key"], [i, j])  # an identical sequence in a later unit: the first copy
            tokens += s["length"] - s["shared"]
        dtype, hidden = meta["dtype"] or dtype, int(meta["hidden_size"]) or hidden
    m = {
        "format": FORMAT,
        "version": VERSION,
        "layer_ids": list(layer_ids),
        "hidden_size": hidden,
        "dtype": dtype,
        "tokens": tokens,
        **extra,
        "shards": shards,
        "entries": entries,
    }
    write_text(root / MANIFEST, json.dumps(m) + "\n")
    return m


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.exists():
        raise FeatureError(f"{root} holds no feature manifest ({MANIFEST}): run `python -m trainer features`")
    m = json.loads(path.read_text())
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        raise FeatureError(
            f"{path}: format {m.get('format')!r} v{m.get('version')}, expected {FORMAT} v{VERSION} "
            "(written by an older trainer: write it again with `python -m trainer features`)"
        )
    return m


def write(
    source: FeatureSource, sequences: Sequence[Sequence[int]], layer_ids: Sequence[int], root: Path
) -> dict[str, Any]:
    """Any sequences' taps from `source` as a one-shard directory (each distinct sequence whole, mask 0):
    the same format from Python, for sources compared outside a training run."""
    root.mkdir(parents=True, exist_ok=True)
    distinct = list({key(s): list(s) for s in sequences}.values())
    feats = source.taps_many(distinct, layer_ids)
    stored = [Stored(s, [0] * len(s), 0, None, f) for s, f in zip(distinct, feats, strict=True)]
    name = shard_name(0, 1)
    write_shard(root / name, stored, layer_ids, plan=key([len(s) for s in distinct]), rank=0)
    return write_manifest(root, [name], layer_ids)


class CacheSource:
    name = "cache"

    def __init__(self, root: str | Path, target_fingerprint: str | None = None) -> None:
        """`target_fingerprint`: the training target's (`Target.fingerprint`); features of another target
        or RoPE (written before a config change) are refused, not trained on."""
        self.root = Path(root)
        self.manifest = read_manifest(self.root)
        stored = self.manifest.get("config", {}).get("target_fingerprint")
        if target_fingerprint is not None and stored != target_fingerprint:
            raise FeatureError(
                f"{self.root} holds features of target {stored or '(not recorded: an older trainer)'}, "
                f"this run's target is {target_fingerprint} (its weights or config, RoPE included, "
                "differ): write them again with `python -m trainer features`"
            )

    def _rows(self, f: Any, segments: list[dict[str, Any]], j: int, a: int, b: int) -> list[torch.Tensor]:
        """Positions a..b of segment j: those below its `shared` from the chain of earlier segments, the
        rest from its own rows; only those rows are read (`get_slice`)."""
        shared = segments[j]["shared"]
        parts = self._rows(f, segments, segments[j]["prev"], a, min(b, shared)) if a < shared else []
        if b > shared:
            parts.append(f.get_slice(f"{j}.taps")[max(a, shared) - shared : b - shared])
        return parts

    def taps_tails(
        self, sequences: Sequence[Sequence[int]], starts: Sequence[int], layer_ids: Sequence[int]
    ) -> list[torch.Tensor]:
        """The features of positions start.. of each sequence (`[T_i − start_i, n·H]`): what a training
        segment that shares its first `start` positions with the one before it needs. With the units
        `trainer features` stored, those are exactly the stored rows: nothing is rebuilt or copied twice."""
        if list(layer_ids) != self.manifest["layer_ids"]:
            raise FeatureError(
                f"{self.root} holds taps {self.manifest['layer_ids']}, asked {list(layer_ids)}"
            )
        where = []
        for ids in sequences:
            hit = self.manifest["entries"].get(key(ids))
            if hit is None:
                raise FeatureError(
                    f"{self.root} has no features for a {len(ids)}-token sequence (key {key(ids)[:12]}): "
                    "built from other data or settings than `trainer features` used (see its data/)"
                )
            where.append(hit)
        out: dict[int, torch.Tensor] = {}
        for shard in sorted({s for s, _ in where}):  # each shard opened once per request
            entry = self.manifest["shards"][shard]
            with safe_open(str(self.root / entry["file"]), framework="pt") as f:
                for n, (s, j) in enumerate(where):
                    if s != shard:
                        continue
                    if f.get_tensor(f"{j}.ids").tolist() != list(sequences[n]):  # a collision or corruption
                        raise FeatureError(
                            f"{self.root}: stored ids of {entry['file']}:{j} differ from the sequence's"
                        )
                    parts = self._rows(f, entry["segments"], j, starts[n], len(sequences[n]))
                    out[n] = parts[0] if len(parts) == 1 else torch.cat(parts)
        return [out[n] for n in range(len(sequences))]

    def taps_many(self, sequences: Sequence[Sequence[int]], layer_ids: Sequence[int]) -> list[torch.Tensor]:
        return self.taps_tails(sequences, [0] * len(sequences), layer_ids)

    def taps(self, input_ids: torch.Tensor, layer_ids: Sequence[int]) -> torch.Tensor:
        return taps_via_many(self, input_ids, layer_ids)
