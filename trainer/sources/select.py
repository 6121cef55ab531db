"""Which feature source a run uses: `SOURCES` registers each one once (its builder, and whether the
trainer runs the target itself in the packed step); `make_source(kind, target, ...)` builds the one a run
config names (`feature_source`); `final_head` gives the vLLM source its check."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from lm.model import Target
from trainer.sources.base import FeatureError, FeatureSource
from trainer.sources.cache import CacheSource
from trainer.sources.hf import HFSource
from trainer.sources.vllm import VllmSource, VllmSourceSettings


def final_head(target: Target) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The target's final norm then LM head (what turns the last layer's output into logits), on CPU
    tensors; None when the loaded target lacks them (then the final-layer check is skipped)."""
    base = getattr(target.model, target.model.base_model_prefix, None)
    norm = getattr(base, "norm", None)
    if norm is None or target.model.get_output_embeddings() is None:
        return None
    weight = next(target.lm_head.parameters())
    device, dtype = weight.device, weight.dtype
    if weight.is_meta:
        return None
    if norm.weight.is_meta:  # a target loaded for its shared weights only: read the norm (H values) by name
        name = next(n for n, p in target.model.named_parameters() if p is norm.weight)
        stored = _read_tensor(Path(target.name), name)
        if stored is None:
            return None
        norm.weight = torch.nn.Parameter(stored.to(device, dtype), requires_grad=False)
    head = torch.nn.Sequential(norm, target.lm_head)

    def logits(h: torch.Tensor) -> torch.Tensor:
        return head(h.to(device, dtype)).cpu()

    return logits


def _read_tensor(root: Path, name: str) -> torch.Tensor | None:
    """One tensor by name from a Hugging Face directory's safetensors files (None when absent)."""
    index = root / "model.safetensors.index.json"
    if index.exists():
        shard = json.loads(index.read_text())["weight_map"].get(name)
        files = [root / shard] if shard else []
    else:
        files = sorted(root.glob("*.safetensors"))
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            if name in fh.keys():  # noqa: SIM118 (safe_open has keys(), not __contains__)
                return fh.get_tensor(name)
    return None


@dataclass(frozen=True)
class SourceEntry:
    build: Callable[[Target, str | Path | None, VllmSourceSettings | None], FeatureSource]
    # True: the packed step runs the target in-process over whole units (sharing each session's prefix);
    # False: the target's weights stay unloaded but for what the drafter shares, features come as taps.
    in_process: bool
    from_files: bool = False  # reads features `trainer features` wrote (so cannot be the one writing them)


def _hf(target: Target, feature_dir: str | Path | None, vllm: VllmSourceSettings | None) -> FeatureSource:
    return HFSource(target)


def _cache(target: Target, feature_dir: str | Path | None, vllm: VllmSourceSettings | None) -> FeatureSource:
    if feature_dir is None:
        raise FeatureError("feature_dir: the cache source needs the directory `trainer features` wrote")
    return CacheSource(feature_dir, target.fingerprint)


def _vllm(target: Target, feature_dir: str | Path | None, vllm: VllmSourceSettings | None) -> FeatureSource:
    hf = HFSource(target)
    loaded = not any(p.is_meta for p in target.model.parameters())

    def reference(ids: Sequence[int], layer_ids: Sequence[int]) -> torch.Tensor:
        return hf.taps_many([ids], layer_ids)[0]

    return VllmSource(
        vllm or VllmSourceSettings.model_validate({}),
        target.num_layers,
        target.hidden_size,
        head=final_head(target),
        reference=reference if loaded else None,  # only shared weights here: no in-process forward
    )


# The one place a feature source is named (TrainConfig.feature_source lists the same names: a test checks).
SOURCES: dict[str, SourceEntry] = {
    "hf": SourceEntry(_hf, in_process=True),
    "cache": SourceEntry(_cache, in_process=False, from_files=True),
    "vllm": SourceEntry(_vllm, in_process=False),
}


def kind_of(name: str) -> SourceEntry:
    if name not in SOURCES:
        raise FeatureError(f"feature_source {name!r}: one of {', '.join(SOURCES)}")
    return SOURCES[name]


def make_source(
    kind: str,
    target: Target,
    *,
    feature_dir: str | Path | None = None,
    vllm: VllmSourceSettings | None = None,
) -> FeatureSource:
    """The source a run config names; `target` supplies shapes, the final-layer check and `hf` itself."""
    return kind_of(kind).build(target, feature_dir, vllm)
