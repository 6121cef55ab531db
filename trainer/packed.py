"""One packed training step: the target's features for a few units, laid side by side.

For each unit the frozen target runs once per segment over only the positions that segment does not
share with the one before it, continuing from that segment's KV cache cropped to the shared prefix: the
features are those of a forward over each call's whole context (what the serving engine computes), but
every shared prefix is computed once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from standin.model import Target
from trainer.data.units import Unit
from trainer.dflash import layout as L


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


def unit_features(target: Target, unit: Unit, layer_ids: list[int], device: torch.device) -> torch.Tensor:
    """[1, sum of computed, n_taps*H]: each segment's new positions, continuing the previous KV cache."""
    cache = target.new_cache()
    parts = []
    for seg in unit.segments:
        Target.crop_cache(cache, seg.shared)  # what the previous segment computed beyond the shared prefix goes
        ids = torch.tensor(seg.seq.input_ids[seg.shared :], dtype=torch.long, device=device)[None]
        out = target.forward(ids, cache, layer_ids=layer_ids, logits_to_keep=1)
        assert out.taps is not None
        parts.append(out.taps)
    return torch.cat(parts, dim=1)


def make_step(target: Target, units: list[Unit], layer_ids: list[int], device: torch.device) -> PackedStep:
    taps = torch.cat([unit_features(target, u, layer_ids, device) for u in units], dim=1)
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


def sample_anchors(step: PackedStep, per_segment: int, generator: torch.Generator) -> torch.Tensor:
    """Up to ``per_segment`` anchors drawn uniformly in each segment, sorted (indices into the step)."""
    cand = torch.nonzero(L.candidates(step.loss_mask.cpu(), _cpu(step.layout)), as_tuple=False).flatten()
    seg = step.layout.seg.cpu()[cand]
    picked = []
    for s in torch.unique(seg).tolist():
        mine = cand[seg == s]
        if mine.numel() > per_segment:
            mine = mine[torch.randperm(mine.numel(), generator=generator)[:per_segment]]
        picked.append(mine)
    out = torch.cat(picked) if picked else cand
    return torch.sort(out).values.to(step.input_ids.device)


def _cpu(layout: L.Layout) -> L.Layout:
    return L.Layout(layout.seg.cpu(), layout.pos.cpu(), layout.share.cpu())
