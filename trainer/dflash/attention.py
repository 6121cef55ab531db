"""Dense (SDPA) attention of the drafter's block queries, for where flex attention does not compile (CPU).

A packed step's boolean mask is [all queries, all keys]: its score matrix grows with the product of the
step's packed length and its anchors, although each segment's blocks see only their own context. On the
CPU every masked score is still computed, so a :class:`DocumentMask` keeps the mask per segment instead:
each group of queries is scored only against the contiguous key range that holds everything it may see.
A masked key adds exactly zero to its row's softmax, so the result is the one of the whole mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# Queries per dense-attention call: the score matrix of one call is heads x QUERY_CHUNK x keys, so a long
# context with many anchors (32k tokens x 512 blocks) stays within memory. Rows are independent
# (a softmax per query), so chunking changes nothing but the peak.
QUERY_CHUNK = 1024


@dataclass
class QueryGroup:
    """Queries ``q0:q1`` (block slots) see context keys ``k0:k1`` and the block keys ``q0:q1`` only."""

    q0: int
    q1: int
    k0: int
    k1: int
    mask: torch.Tensor  # [q1 - q0, (k1 - k0) + (q1 - q0)] bool, True = may attend


@dataclass
class DocumentMask:
    """A block-diagonal attention mask: groups in query order, covering every query once."""

    groups: list[QueryGroup]


def dense_attention(
    q: torch.Tensor,  # [b, heads, Q, d]
    k: torch.Tensor,  # [b, heads, C + Q, d]: context keys, then the block keys
    v: torch.Tensor,
    mask: torch.Tensor | DocumentMask | None,
    scale: float,
) -> torch.Tensor:
    if isinstance(mask, DocumentMask):
        return _per_group(q, k, v, mask, scale)
    q_len = q.shape[2]
    if q_len <= QUERY_CHUNK:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    parts = []
    for s in range(0, q_len, QUERY_CHUNK):
        m = mask[s : s + QUERY_CHUNK] if mask is not None else None
        parts.append(
            F.scaled_dot_product_attention(q[:, :, s : s + QUERY_CHUNK], k, v, attn_mask=m, scale=scale)
        )
    return torch.cat(parts, dim=2)


def _per_group(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: DocumentMask, scale: float
) -> torch.Tensor:
    c = k.shape[2] - q.shape[2]  # where the block keys begin
    parts = []
    for g in mask.groups:
        keys = torch.cat([k[:, :, g.k0 : g.k1], k[:, :, c + g.q0 : c + g.q1]], dim=2)
        values = torch.cat([v[:, :, g.k0 : g.k1], v[:, :, c + g.q0 : c + g.q1]], dim=2)
        parts.append(dense_attention(q[:, :, g.q0 : g.q1], keys, values, g.mask, scale))
    out = torch.cat(parts, dim=2) if parts else q[:, :, :0]
    if out.shape[2] != q.shape[2]:
        raise ValueError(f"a DocumentMask must cover every query once: {out.shape[2]} of {q.shape[2]}")
    return out
