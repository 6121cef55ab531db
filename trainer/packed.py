"""One packed training step: the target's features for a few units, laid side by side.

For each unit the frozen target runs once per segment over only the positions that segment does not
share with the one before it, continuing from that segment's KV cache cropped to the shared prefix: the
features are those of a forward over each call's whole context (what the serving engine computes), but
every shared prefix is computed once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from standin.model import Target
from trainer.config import TrainConfig
from trainer.data.build import Sequence
from trainer.data.units import Unit, pack, session_units, split_unit
from trainer.dflash import layout as L
from trainer.sources.base import step_taps
from trainer.sources.select import source_for


@dataclass
class PackedStep:
    taps: torch.Tensor  # [1, T, n_taps*H]: features of every packed position
    input_ids: torch.Tensor  # [T]
    loss_mask: torch.Tensor  # [T]
    layout: L.Layout

    @property
    def computed(self) -> int:
        """Target positions computed for this step (= packed positions)."""
        return int(self.input_ids.numel())

    @property
    def supervised(self) -> int:
        return int(self.loss_mask.sum())


# ([1, T] ids, start) -> [1, T - start, n_taps*H]: the features of positions start.. of a whole sequence
TapsFn = Callable[[torch.Tensor, int], torch.Tensor]


def unit_features(
    target: Target, unit: Unit, layer_ids: list[int], device: torch.device, taps_fn: TapsFn | None = None
) -> torch.Tensor:
    """[1, sum of computed, n_taps*H]: each segment's new positions, continuing the previous KV cache.

    ``taps_fn``: features from elsewhere (a feature source: files, a server) of each segment's positions
    past its shared prefix (those below it are the same features, served by the earlier segment)."""
    parts = []
    cache = target.new_cache()
    for i, seg in enumerate(unit.segments):
        ids = torch.tensor(seg.seq.input_ids, dtype=torch.long, device=device)[None]
        last = i == len(unit.segments) - 1
        if taps_fn is not None:
            parts.append(taps_fn(ids, seg.shared).to(device))
            continue
        if seg.shared == 0 and last:  # nothing to continue from, nothing continues from it: no cache kept
            parts.append(target.tap(ids, layer_ids).to(device))
            continue
        # drop what the previous segment computed beyond the shared prefix, then extend the cache
        Target.crop_cache(cache, seg.shared)
        out = target.forward(ids[:, seg.shared :], cache, layer_ids=layer_ids, logits_to_keep=1)
        assert out.taps is not None
        parts.append(out.taps.to(device))  # a sharded target's taps come off its first GPU
    return torch.cat(parts, dim=1)


def make_step(
    target: Target,
    units: list[Unit],
    layer_ids: list[int],
    device: torch.device,
    taps_fn: TapsFn | None = None,
) -> PackedStep:
    taps = torch.cat([unit_features(target, u, layer_ids, device, taps_fn) for u in units], dim=1)
    segs = [s for u in units for s in u.segments]
    ids = [t for s in segs for t in s.seq.input_ids[s.shared :]]
    mask = [m for s in segs for m in s.seq.loss_mask[s.shared :]]
    share = L.block_diagonal([L.chain_share([s.shared for s in u.segments]) for u in units])
    layout = L.Layout.build([s.computed for s in segs], [s.shared for s in segs], share, device)
    return PackedStep(
        taps,
        torch.tensor(ids, dtype=torch.long, device=device),
        torch.tensor(mask, dtype=torch.long, device=device),
        layout,
    )


def step_for(
    cfg: TrainConfig, target: Target, units: list[Unit], layer_ids: list[int], device: torch.device
) -> PackedStep:
    """The packed step with its features from the configured source: the target in-process (``hf``), or
    whole sequences asked of ``trainer.sources`` in one batch (``cache``: offline features; ``vllm``)."""
    taps_fn = None
    if cfg.feature_source != "hf":
        source = source_for(cfg.feature_source, target, cfg.feature_dir, cfg.vllm)
        segs = [seg for u in units for seg in u.segments]
        from_source = step_taps(source, [s.seq.input_ids for s in segs], layer_ids, [s.shared for s in segs])
        # features in the training dtype: bf16 files feed a float32 CPU drafter as float32
        dtype = next(target.embed_tokens.parameters()).dtype

        def taps_fn(ids: torch.Tensor, start: int) -> torch.Tensor:
            return from_source(ids, start).to(dtype)

    return make_step(target, units, layer_ids, device, taps_fn)


def sample_anchors(
    step: PackedStep, per_segment: int, generator: torch.Generator, per_step: int | None = None
) -> torch.Tensor:
    """Up to ``per_segment`` anchors drawn uniformly in each segment, then at most ``per_step`` of those
    drawn uniformly (so segments keep shares in proportion to their candidates); sorted step indices."""
    cand = torch.nonzero(L.candidates(step.loss_mask.cpu(), _cpu(step.layout)), as_tuple=False).flatten()
    seg = step.layout.seg.cpu()[cand]
    picked = []
    for s in torch.unique(seg).tolist():
        mine = cand[seg == s]
        if mine.numel() > per_segment:
            mine = mine[torch.randperm(mine.numel(), generator=generator)[:per_segment]]
        picked.append(mine)
    out = torch.cat(picked) if picked else cand
    if per_step is not None and out.numel() > per_step:
        out = out[torch.randperm(out.numel(), generator=generator)[:per_step]]
    return torch.sort(out).values.to(step.input_ids.device)


def _cpu(layout: L.Layout) -> L.Layout:
    return L.Layout(layout.seg.cpu(), layout.pos.cpu(), layout.share.cpu())


def plan_steps(cfg: TrainConfig, seqs: list[Sequence]) -> list[list[Unit]]:
    """The steps of one epoch: units (a session's sequences sharing prefixes, or one sequence each),
    packed up to ``max_len`` computed tokens, or one unit (part) per step."""
    units = session_units(seqs, share=cfg.prefix_sharing)
    if cfg.packing:
        return pack(units, cfg.max_len)
    return [[part] for u in units for part in split_unit(u, cfg.max_len)]


def describe_steps(cfg: TrainConfig, steps: list[list[Unit]]) -> str:
    computed = [sum(u.computed for u in s) for s in steps]
    segments = sum(len(u.segments) for s in steps for u in s)
    return (
        f"{segments} sequences, {sum(computed)} target tokens, at most {max(computed)} per step, "
        f"packing {'on' if cfg.packing else 'off'}, prefix sharing {'on' if cfg.prefix_sharing else 'off'}"
    )
