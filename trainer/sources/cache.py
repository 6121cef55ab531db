"""`cache`: features written ahead of training, read back by the token ids they belong to.

Layout of a feature directory (this module's own minimal format, version 1):

    manifest.json    {"format": "dflash-factory-features", "version": 1, "layer_ids": [...],
                      "hidden_size": H, "dtype": "float32", "shards": ["shard-00000.safetensors", ...],
                      "entries": {KEY: {"shard": i, "length": T}},          # stored sequences
                      "aliases": {KEY: {"of": KEY, "length": T}}}           # prefixes of stored ones
    shard-NNNNN.safetensors   KEY.taps [T, len(layer_ids)·H], KEY.ids [T] (int64)

KEY is the SHA-256 of the sequence's int64 token ids, so a reader needs nothing but the ids; a sequence
that is a prefix of another is stored once, as an alias of the longer one. `write` appends a shard per
call and rewrites the manifest atomically after it, so a killed writer loses at most its last shard.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from trainer.sources.base import FeatureError, FeatureSource, prefix_groups, taps_via_many

FORMAT, VERSION, MANIFEST = "dflash-factory-features", 1, "manifest.json"


def key(ids: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(list(ids), dtype=np.int64).tobytes()).hexdigest()


def _manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.exists():
        raise FeatureError(f"{root} holds no feature manifest ({MANIFEST})")
    m = json.loads(path.read_text())
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        raise FeatureError(
            f"{path}: format {m.get('format')!r} v{m.get('version')}, expected {FORMAT} v{VERSION}"
        )
    return m


def write(
    source: FeatureSource, sequences: Sequence[Sequence[int]], layer_ids: Sequence[int], root: Path
) -> dict[str, Any]:
    """Compute the taps of `sequences` with `source` and add them to the directory as one shard."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        m = _manifest(root)
    except FeatureError:
        m = {
            "format": FORMAT,
            "version": VERSION,
            "layer_ids": list(layer_ids),
            "shards": [],
            "entries": {},
            "aliases": {},
        }
    if m["layer_ids"] != list(layer_ids):
        raise FeatureError(f"{root} holds taps {m['layer_ids']}, not {list(layer_ids)}")
    owner = prefix_groups(sequences)
    todo = sorted({o for o in owner if key(sequences[o]) not in m["entries"]})
    feats = source.taps_many([sequences[i] for i in todo], layer_ids)
    shard = f"shard-{len(m['shards']):05d}.safetensors"
    tensors: dict[str, torch.Tensor] = {}
    for i, f in zip(todo, feats, strict=True):
        k = key(sequences[i])
        tensors[f"{k}.taps"] = f.contiguous()
        tensors[f"{k}.ids"] = torch.tensor(list(sequences[i]), dtype=torch.int64)
    if tensors:
        save_file(tensors, str(root / shard))
        m["shards"].append(shard)
        for i, f in zip(todo, feats, strict=True):
            m["entries"][key(sequences[i])] = {"shard": len(m["shards"]) - 1, "length": len(sequences[i])}
            m["hidden_size"], m["dtype"] = f.shape[-1] // len(layer_ids), str(f.dtype).removeprefix("torch.")
    for i, o in enumerate(owner):
        if o != i and key(sequences[i]) != key(sequences[o]):
            m["aliases"][key(sequences[i])] = {"of": key(sequences[o]), "length": len(sequences[i])}
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(m) + "\n")
    tmp.replace(root / MANIFEST)
    return m


class CacheSource:
    name = "cache"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.manifest = _manifest(self.root)

    def _one(self, ids: Sequence[int], layer_ids: Sequence[int]) -> torch.Tensor:
        if list(layer_ids) != self.manifest["layer_ids"]:
            raise FeatureError(
                f"{self.root} holds taps {self.manifest['layer_ids']}, asked {list(layer_ids)}"
            )
        k, length = key(ids), len(ids)
        alias = self.manifest["aliases"].get(k)
        if alias is not None:
            k = alias["of"]
        entry = self.manifest["entries"].get(k)
        if entry is None:
            raise FeatureError(
                f"{self.root} has no features for a {length}-token sequence (key {key(ids)[:12]})"
            )
        with safe_open(str(self.root / self.manifest["shards"][entry["shard"]]), framework="pt") as f:
            stored_ids = f.get_tensor(f"{k}.ids")
            if stored_ids[:length].tolist() != list(ids):  # a hash collision or a corrupt shard
                raise FeatureError(f"{self.root}: stored ids of key {k[:12]} differ from the sequence's")
            return f.get_tensor(f"{k}.taps")[:length]

    def taps_many(self, sequences: Sequence[Sequence[int]], layer_ids: Sequence[int]) -> list[torch.Tensor]:
        return [self._one(s, layer_ids) for s in sequences]

    def taps(self, input_ids: torch.Tensor, layer_ids: Sequence[int]) -> torch.Tensor:
        return taps_via_many(self, input_ids, layer_ids)
