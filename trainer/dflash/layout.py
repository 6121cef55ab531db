"""A packed step's layout: several segments (calls, sequences) side by side in one context.

Each packed position has a segment ``seg`` and its absolute position ``pos`` in its own call. A block
anchored in segment c at position a sees context position j when ``pos[j] < min(share[seg[j], c], a)``:

- ``share[c, c]`` is unbounded: a segment sees its own positions before the anchor (DFlash's ``<``);
- ``share[k, c]`` for an earlier segment k of the same unit is the prefix that k and every segment
  between k and c have in common: those features are exactly what c would have computed (a causal
  target, the same tokens), so c reads them from k instead of recomputing them;
- ``share[k, c] = 0`` across units: documents packed into one step never see each other.

Labels, like attention, never cross a segment: slot k of a block is a label only while ``a + k`` is in
the anchor's segment. With one segment this is exactly ``helpers.block_attention_mask`` and
``helpers.block_labels``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainer.dflash.attention import DocumentMask, QueryGroup

UNBOUNDED = 2**62


@dataclass
class Layout:
    seg: torch.Tensor  # [T] long: segment index of each packed position
    pos: torch.Tensor  # [T] long: position in its own call
    share: torch.Tensor  # [S, S] long: share[k, c] as above

    @classmethod
    def build(
        cls, lengths: Sequence[int], starts: Sequence[int], share: torch.Tensor, device: torch.device
    ) -> Layout:
        """Segments of ``lengths`` new positions, segment i starting at position ``starts[i]``."""
        seg = torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(lengths)])
        pos = torch.cat(
            [torch.arange(s, s + n, dtype=torch.long) for s, n in zip(starts, lengths, strict=True)]
        )
        return cls(seg.to(device), pos.to(device), share.to(device))

    @classmethod
    def single(cls, length: int, device: torch.device) -> Layout:
        return cls.build([length], [0], torch.full((1, 1), UNBOUNDED, dtype=torch.long), device)

    @property
    def length(self) -> int:
        return int(self.seg.numel())

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Layout:
        """The same layout with ``fn`` applied to each tensor (a device move, a pinned host copy)."""
        return Layout(fn(self.seg), fn(self.pos), fn(self.share))


def chain_share(shared: Sequence[int]) -> torch.Tensor:
    """``share`` for one unit whose segment i shares ``shared[i]`` positions with segment i-1."""
    n = len(shared)
    out = torch.zeros(n, n, dtype=torch.long)
    for c in range(n):
        out[c, c] = UNBOUNDED
        limit = UNBOUNDED
        for k in range(c - 1, -1, -1):
            limit = min(limit, int(shared[k + 1]))
            out[k, c] = limit
    return out


def block_diagonal(blocks: Sequence[torch.Tensor]) -> torch.Tensor:
    """Units packed side by side: their ``share`` matrices on the diagonal, 0 between units."""
    return torch.block_diag(*blocks) if blocks else torch.zeros(0, 0, dtype=torch.long)


def candidates(loss_mask: torch.Tensor, layout: Layout) -> torch.Tensor:
    """[T] bool: anchors whose next position is supervised and in the same segment."""
    m = loss_mask.bool()
    ok = torch.zeros_like(m)
    ok[:-1] = m[:-1] & m[1:] & (layout.seg[:-1] == layout.seg[1:])
    return ok


def block_labels(
    input_ids: torch.Tensor, loss_mask: torch.Tensor, anchors: torch.Tensor, block_size: int, layout: Layout
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels and validity [A, B]: ``helpers.block_labels`` that also stops at the segment's end."""
    t = input_ids.shape[0]
    idx = anchors[:, None] + torch.arange(block_size, device=anchors.device)[None, :]
    inside = idx < t
    safe = idx.clamp(max=t - 1)
    inside &= layout.seg[safe] == layout.seg[anchors][:, None]
    labels = torch.where(inside, input_ids[safe], torch.zeros_like(safe))
    sup = inside & loss_mask.bool()[safe]
    sup[:, 0] = True
    valid = torch.cumprod(sup.to(torch.int64), dim=1).bool()
    valid[:, 0] = False
    return labels, valid


def greedy_targets(
    input_ids: torch.Tensor, next_ids: torch.Tensor, supervised: torch.Tensor, layout: Layout
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels along the target's own greedy chain: (label ids [T], loss mask [T]).

    ``next_ids[j]`` is the target's greedy token after row j (the argmax of its logits there). Row r's
    label is ``next_ids[r-1]``: what greedy decoding emits at r given the text before it. A block anchored
    at a is drafted, at serving time, from a greedy prefix: slot k's label is the greedy chain's only
    while the text a..a+k-1 follows that chain, so row r is supervised when ``supervised[r]`` and the
    token before it is the target's greedy choice (``block_labels``' run over the mask then stops at the
    first slot after a departure). A segment's first row has no previous row here, so neither it nor the
    row after it is ever a label (a prefix-shared segment loses one anchor, no more)."""
    same = torch.zeros_like(supervised, dtype=torch.bool)
    same[1:] = layout.seg[1:] == layout.seg[:-1]
    labels = input_ids.clone()
    labels[1:] = torch.where(same[1:], next_ids[:-1], input_ids[1:])
    follows = same & (input_ids == labels)  # row r's token is the greedy choice after row r-1
    mask = torch.zeros_like(supervised)
    mask[1:] = (supervised[1:].bool() & same[1:] & follows[:-1]).to(supervised.dtype)
    return labels, mask


def block_positions(anchors: torch.Tensor, block_size: int, layout: Layout) -> torch.Tensor:
    """[A, B] the slots' positions in their own call."""
    return layout.pos[anchors][:, None] + torch.arange(block_size, device=anchors.device)[None, :]


def _limits(anchors: torch.Tensor, block_size: int, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query (block slot): its segment and the position its anchor sits at."""
    q_anchor = anchors.repeat_interleave(block_size)
    return layout.seg[q_anchor], layout.pos[q_anchor]


def _mask(
    q_seg: torch.Tensor, q_pos: torch.Tensor, block_size: int, layout: Layout, k0: int, k1: int
) -> torch.Tensor:
    """[Q, (k1 - k0) + Q] bool: these queries against context positions k0:k1 and their own blocks."""
    seg, pos = layout.seg[k0:k1], layout.pos[k0:k1]
    limit = torch.minimum(layout.share[seg[None, :], q_seg[:, None]], q_pos[:, None])  # [Q, k1 - k0]
    q_block = torch.arange(q_seg.numel(), device=q_seg.device) // block_size
    return torch.cat([pos[None, :] < limit, q_block[:, None] == q_block[None, :]], dim=1)


def attention_mask(anchors: torch.Tensor, block_size: int, layout: Layout) -> torch.Tensor:
    """[A*B, T + A*B] bool (True = may attend): the context rule above, and each block's own slots."""
    q_seg, q_pos = _limits(anchors, block_size, layout)
    return _mask(q_seg, q_pos, block_size, layout, 0, layout.length)


def document_mask(anchors: torch.Tensor, block_size: int, layout: Layout) -> DocumentMask:
    """:func:`attention_mask` kept per segment (the dense path's form of a packed step): the blocks of
    segment c are scored only against the context range spanning the segments c may see
    (``share[k, c] > 0``: c itself and the earlier segments of its unit), never against the rest of
    the step, so a packed step costs what its segments cost one at a time. ``anchors`` sorted."""
    if anchors.numel() > 1 and bool((anchors[1:] < anchors[:-1]).any()):
        raise ValueError("anchors must be sorted: each segment's blocks are one run of queries")
    q_seg, q_pos = _limits(anchors, block_size, layout)
    ends = torch.cumsum(torch.bincount(layout.seg, minlength=layout.share.shape[0]), 0).tolist()
    starts = [0, *ends[:-1]]
    segs, counts = torch.unique_consecutive(layout.seg[anchors], return_counts=True)
    groups, q0 = [], 0
    for c, n in zip(segs.tolist(), counts.tolist(), strict=True):
        seen = torch.nonzero(layout.share[:, c] > 0).flatten().tolist()
        k0, k1 = min(starts[k] for k in seen), max(ends[k] for k in seen)
        q1 = q0 + n * block_size
        mask = _mask(q_seg[q0:q1], q_pos[q0:q1], block_size, layout, k0, k1)
        groups.append(QueryGroup(q0, q1, k0, k1, mask))
        q0 = q1
    return DocumentMask(groups)


def mask_mod(anchors: torch.Tensor, block_size: int, layout: Layout) -> Callable[..., Any]:
    """The same mask as :func:`attention_mask`, as a flex-attention ``mask_mod``."""
    q_seg, q_pos = _limits(anchors, block_size, layout)
    # a tensor, not a Python int: compiled flex attention guards on an int's value (a graph per length)
    t = torch.full((), layout.length, dtype=torch.long, device=layout.seg.device)  # no blocking copy

    def mod(b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
        j = kv_idx.clamp(max=t - 1)
        limit = torch.minimum(layout.share[layout.seg[j], q_seg[q_idx]], q_pos[q_idx])
        in_ctx = (kv_idx < t) & (layout.pos[j] < limit)
        same_block = (kv_idx >= t) & ((kv_idx - t) // block_size == q_idx // block_size)
        return in_ctx | same_block

    return mod
