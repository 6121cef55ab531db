"""Feature sources: where training gets the target's taps (`hf`, `cache`, `vllm`); see `base`.

`make_source(kind, target, ...)` builds the one a run config names (`feature_source`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import torch

from standin.model import Target
from trainer.sources.base import FeatureError, FeatureSource, prefix_groups, step_taps
from trainer.sources.cache import CacheSource
from trainer.sources.hf import HFSource
from trainer.sources.numbering import TapNumberingError, from_vllm, to_vllm
from trainer.sources.vllm import VllmSource, VllmSourceSettings

SourceKind = Literal["hf", "cache", "vllm"]

__all__ = [
    "CacheSource",
    "FeatureError",
    "FeatureSource",
    "HFSource",
    "SourceKind",
    "TapNumberingError",
    "VllmSource",
    "VllmSourceSettings",
    "from_vllm",
    "make_source",
    "prefix_groups",
    "source_for",
    "step_taps",
    "to_vllm",
]


def final_head(target: Target) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The target's final norm then LM head (what turns the last layer's output into logits), on CPU
    tensors; None when the loaded target lacks them (then the final-layer check is skipped)."""
    base = getattr(target.model, target.model.base_model_prefix, None)
    norm = getattr(base, "norm", None)
    if norm is None or target.model.get_output_embeddings() is None:
        return None
    head = torch.nn.Sequential(norm, target.lm_head)
    weight = next(target.lm_head.parameters())
    device, dtype = weight.device, weight.dtype

    def logits(h: torch.Tensor) -> torch.Tensor:
        return head(h.to(device, dtype)).cpu()

    return logits


def make_source(
    kind: str,
    target: Target,
    *,
    feature_dir: str | Path | None = None,
    vllm: VllmSourceSettings | None = None,
) -> FeatureSource:
    """The source a run config names; `target` supplies shapes, the final-layer check and `hf` itself."""
    if kind == "hf":
        return HFSource(target)
    if kind == "cache":
        if feature_dir is None:
            raise FeatureError("feature_dir: the cache source needs the directory `trainer features` wrote")
        return CacheSource(feature_dir)
    if kind == "vllm":
        hf = HFSource(target)

        def reference(ids: Sequence[int], layer_ids: Sequence[int]) -> torch.Tensor:
            return hf.taps_many([ids], layer_ids)[0]

        return VllmSource(
            vllm or VllmSourceSettings.model_validate({}),
            target.num_layers,
            target.hidden_size,
            head=final_head(target),
            reference=reference,
        )
    raise FeatureError(f"feature_source {kind!r}: one of hf, cache, vllm")


_BUILT: dict[tuple[str, int, str | None, str], FeatureSource] = {}


def source_for(
    kind: str, target: Target, feature_dir: str | None, vllm: VllmSourceSettings | None
) -> FeatureSource:
    """`make_source`, built once per run and target (the training loop asks every step)."""
    vllm = vllm or VllmSourceSettings.model_validate({})
    key = (kind, id(target), feature_dir, vllm.model_dump_json())
    if key not in _BUILT:
        _BUILT.clear()  # one run's source at a time
        _BUILT[key] = make_source(kind, target, feature_dir=feature_dir, vllm=vllm)
    return _BUILT[key]
