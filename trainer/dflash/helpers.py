"""Pure tensor helpers of DFlash training: tap ids, anchors, block layout, the attention mask, loss weights.

Everything here is a plain function of tensors (no modules, no state), so each DFlash convention that
silently costs acceptance when it is off by one has one place to live and one unit test:

- tap id k is the OUTPUT of target decoder layer k, i.e. Hugging Face ``hidden_states[k + 1]``
  (``lm.taps`` owns that convention);
- a block anchored at position ``a`` holds the anchor token ``ids[a]`` in slot 0 and the mask token in
  slots 1..B-1, at positions ``a .. a+B-1``; slot k is trained to predict ``ids[a + k]`` (no shift);
- the block sees target context at positions strictly before ``a`` (``<``, never ``<=``) and its own
  slots bidirectionally, nothing else;
- slot k's loss weight is ``exp(-(k-1)/gamma)``; slot 0 (the known anchor) has weight 0.
"""

from __future__ import annotations

import torch

from lm.taps import default_target_layer_ids

__all__ = ["default_target_layer_ids"]  # the tap convention is the target's; re-exported for callers here

# gamma of the exponential position decay used by the DFlash paper for its block sizes.
_PAPER_GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}


def default_gamma(block_size: int) -> float:
    """gamma of w_k = exp(-(k-1)/gamma): 7 for B=16, 5 for B=10, 4 for B=8 (the paper); B/2 otherwise."""
    return _PAPER_GAMMA.get(block_size, block_size / 2.0)


def loss_weights(block_size: int, gamma: float, device: torch.device | None = None) -> torch.Tensor:
    """[B] weights per block slot: 0 for slot 0 (the anchor, given), exp(-(k-1)/gamma) for slot k >= 1."""
    k = torch.arange(block_size, dtype=torch.float32, device=device)
    w = torch.exp(-(k - 1) / gamma)
    w[0] = 0.0
    return w


def anchor_candidates(loss_mask: torch.Tensor) -> torch.Tensor:
    """[T] bool: positions that can anchor a training block.

    An anchor is a token the target generated (at inference it is the last accepted token) whose next
    token is also supervised, so the block has at least one label.
    """
    m = loss_mask.bool()
    ok = torch.zeros_like(m)
    ok[:-1] = m[:-1] & m[1:]
    return ok


def sample_anchors(
    loss_mask: torch.Tensor, num_anchors: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Up to ``num_anchors`` distinct anchor positions drawn uniformly from the candidates, sorted ascending."""
    cand = torch.nonzero(anchor_candidates(loss_mask), as_tuple=False).flatten()
    if cand.numel() > num_anchors:
        perm = torch.randperm(cand.numel(), generator=generator, device="cpu")[:num_anchors]
        cand = cand[perm.to(cand.device)]
    return torch.sort(cand).values


def block_positions(anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """[A, B] absolute positions of each block's slots: anchor + 0 .. anchor + B-1."""
    return anchors[:, None] + torch.arange(block_size, device=anchors.device)[None, :]


def block_input_ids(
    input_ids: torch.Tensor, anchors: torch.Tensor, block_size: int, mask_token_id: int
) -> torch.Tensor:
    """[A, B] draft inputs: slot 0 = the anchor token itself, slots 1..B-1 = the mask token."""
    ids = torch.full((anchors.numel(), block_size), mask_token_id, dtype=torch.long, device=input_ids.device)
    ids[:, 0] = input_ids[anchors]
    return ids


def block_labels(
    input_ids: torch.Tensor, loss_mask: torch.Tensor, anchors: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels [A, B] and validity [A, B] for each block slot.

    Slot k of the block anchored at a predicts ``ids[a + k]`` (the token AT that position; the shift is
    in the block layout, not in the labels). A slot is valid when k >= 1, a+k is inside the sequence, and
    every position a+1..a+k is supervised: once a label leaves the generated span (a user turn, a masked
    thinking block) nothing after it can ever be accepted, so it is not trained either.
    """
    t = input_ids.shape[0]
    pos = block_positions(anchors, block_size)
    inside = pos < t
    safe = pos.clamp(max=t - 1)
    labels = torch.where(inside, input_ids[safe], torch.zeros_like(safe))
    sup = inside & loss_mask.bool()[safe]
    sup[:, 0] = True  # the anchor itself is not a label; it must not break the run below
    valid = torch.cumprod(sup.to(torch.int64), dim=1).bool()
    valid[:, 0] = False
    return labels, valid


def block_attention_mask(anchors: torch.Tensor, context_len: int, block_size: int) -> torch.Tensor:
    """[A*B, T + A*B] bool (True = may attend) for queries = all block slots, keys = [context ; blocks].

    A query of the block anchored at a sees context positions p < a (strictly: the target has not yet
    produced a feature for the anchor token when the block is drafted) and every slot of its own block.
    """
    a = anchors.numel()
    q_anchor = anchors.repeat_interleave(block_size)  # [A*B]
    ctx = torch.arange(context_len, device=anchors.device)[None, :] < q_anchor[:, None]  # [A*B, T]
    q_block = torch.arange(a * block_size, device=anchors.device) // block_size
    own = q_block[:, None] == q_block[None, :]  # [A*B, A*B]
    return torch.cat([ctx, own], dim=1)


def block_mask_mod(anchors: torch.Tensor, context_len: int, block_size: int):  # type: ignore[no-untyped-def]
    """The same mask as :func:`block_attention_mask`, as a flex-attention ``mask_mod``."""
    q_anchor = anchors.repeat_interleave(block_size)
    # a tensor, not a Python int: compiled flex attention guards on an int's value (a graph per length)
    ctx = torch.full((), context_len, dtype=torch.long, device=anchors.device)  # no blocking copy

    def mask_mod(b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
        in_ctx = (kv_idx < ctx) & (kv_idx < q_anchor[q_idx])
        same_block = (kv_idx >= ctx) & ((kv_idx - ctx) // block_size == q_idx // block_size)
        return in_ctx | same_block

    return mask_mod


def per_position_accuracy(
    pred: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per slot k = 1..B-1: (correct count, valid count), each [B-1]."""
    hit = (pred == labels) & valid
    return hit[:, 1:].sum(0), valid[:, 1:].sum(0)


def accepted_lengths(pred: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[A]: per block, how many of its drafted slots 1.. a verifier would accept before the first one that
    misses its label (a slot that is not a label ends the run: nothing after it can be checked)."""
    hit = ((pred == labels) & valid)[:, 1:]
    return torch.cumprod(hit.to(torch.int64), dim=1).sum(1)


def acceptance_from_accuracy(correct: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """Teacher-forced estimate of tau from per-slot accuracies (an upper-bound-ish proxy for logging only).

    tau ~ 1 + sum_k prod_{j<=k} acc_j. Real tau comes only from speculative decoding (trainer.evaluate).
    """
    acc = correct.float() / total.float().clamp_min(1)
    return 1.0 + torch.cumprod(acc, 0).sum()
