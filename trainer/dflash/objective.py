"""The DFlash training objective for one sequence: many anchored blocks share one target forward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from torch.utils.checkpoint import checkpoint

from trainer.dflash import compiled
from trainer.dflash import helpers as H
from trainer.dflash import layout as L
from trainer.dflash.model import DFlashDraftModel, Slots


@dataclass
class StepOutput:
    loss: torch.Tensor
    correct: torch.Tensor  # [B-1] per block slot 1..B-1
    total: torch.Tensor  # [B-1]
    n_anchors: int
    n_labels: int
    weight: torch.Tensor  # the summed loss weight of the labels (the loss's denominator)
    accepted: torch.Tensor | None = None  # [A] per block: its leading drafted tokens that match their labels


# Query rows per piece of a block mask's construction (a multiple of flex attention's 128-row blocks).
MASK_ROWS = 1024


def _create(mod: Any, q: int, context_len: int, device: torch.device, rows: int = MASK_ROWS) -> BlockMask:
    """The flex BlockMask of `mod` over q queries × (context + q) keys: compiled where flex attention is
    (``compiled.block_mask``), else built `rows` queries at a time.

    `create_block_mask` evaluates the mask over every query × key before reducing it to 128×128 blocks
    (about 16 bytes per pair, measured): at 32k queries of a packed step over a 48k-token context that
    is ~25 GB at once. Built in pieces of `rows` queries, the transient is rows × keys, and the pieces'
    block rows are joined into one mask (the same one: tests/trainer/dflash/test_flex_mask.py)."""
    kv_len = context_len + q
    if compiled.is_compiled(device):  # fused: no queries × keys temporary, so no pieces either
        return compiled.block_mask(device)(mod, B=None, H=None, Q_LEN=q, KV_LEN=kv_len, device=device)
    if q <= rows:
        return create_block_mask(mod, B=None, H=None, Q_LEN=q, KV_LEN=kv_len, device=device)
    parts: list[BlockMask] = []
    for start in range(0, q, rows):
        offset = torch.full((), start, dtype=torch.long, device=device)  # a tensor: one mask graph

        def piece(b: Any, h: Any, q_idx: Any, kv_idx: Any, offset: torch.Tensor = offset) -> Any:
            return mod(b, h, q_idx + offset, kv_idx)

        n = min(rows, q - start)
        parts.append(create_block_mask(piece, B=None, H=None, Q_LEN=n, KV_LEN=kv_len, device=device))

    def joined(name: str) -> torch.Tensor:  # the pieces' block rows, one under the other
        return torch.cat([getattr(p, name) for p in parts], dim=2)

    return BlockMask.from_kv_blocks(
        joined("kv_num_blocks"),
        joined("kv_indices"),
        joined("full_kv_num_blocks"),  # create_block_mask separates full blocks by default
        joined("full_kv_indices"),
        BLOCK_SIZE=parts[0].BLOCK_SIZE,
        mask_mod=mod,
        seq_lengths=(q, kv_len),
    )


def _flex_mask(anchors: torch.Tensor, context_len: int, block_size: int, device: torch.device) -> BlockMask:
    mod = H.block_mask_mod(anchors, context_len, block_size)
    return _create(mod, anchors.numel() * block_size, context_len, device)


def use_flex_attention(device: torch.device) -> bool:
    """Flex attention where it compiles (CUDA); SDPA with an explicit boolean mask otherwise."""
    return device.type == "cuda"


def block_hidden(
    drafter: nn.Module,
    taps: torch.Tensor,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    anchors: torch.Tensor,
    embed_weight: torch.Tensor,
    block_size: int,
    mask_token_id: int,
    flex: bool,
    layout: L.Layout | None,
    shift: int = 0,
    label_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The drafter's pass over every anchored block: (hidden [1, A*S, H], labels [A, S], valid [A, S]) with
    S = ``block_size - shift`` query slots. DFlash (shift 0): slot k predicts the token at a+k (slot 0 is
    the anchor, never a label). DSpark (shift 1): its B-1 slots are [anchor, mask...] and slot k predicts
    the token at a+k+1, so the labels are DFlash's slots 1..B-1. ``label_ids``: each position's label
    where it is not its own token (greedy labels); the block's inputs are always ``input_ids``."""
    label_ids = input_ids if label_ids is None else label_ids
    t = input_ids.shape[0]
    a = anchors.numel()
    b = block_size - shift
    dev = taps.device
    blk = H.block_input_ids(input_ids, anchors, b, mask_token_id)
    noise = F.embedding(blk, embed_weight).reshape(1, a * b, -1).to(taps.dtype)
    mask: torch.Tensor | L.DocumentMask | BlockMask
    if layout is None:
        pos = torch.cat([torch.arange(t, device=dev), H.block_positions(anchors, b).flatten()])[None]
        mask = _flex_mask(anchors, t, b, dev) if flex else H.block_attention_mask(anchors, t, b)
        labels, valid = H.block_labels(label_ids, loss_mask, anchors, block_size)
    else:
        pos = torch.cat([layout.pos, L.block_positions(anchors, b, layout).flatten()])[None]
        # dense (CPU): per segment, so the packed step's other documents are never scored
        mask = (
            _create(L.mask_mod(anchors, b, layout), a * b, t, dev)
            if flex
            else L.document_mask(anchors, b, layout)
        )
        labels, valid = L.block_labels(label_ids, loss_mask, anchors, block_size, layout)
    return drafter(noise, taps, pos, mask), labels[:, shift:], valid[:, shift:]


def tokens_before(input_ids: torch.Tensor, anchors: torch.Tensor, slots: int, shift: int) -> torch.Tensor:
    """[A, slots]: the true token before each query slot of each anchored block (what a kind's heads read
    under teacher forcing)."""
    t = input_ids.shape[0]
    k = torch.arange(slots, device=anchors.device)[None, :]
    return input_ids[(anchors[:, None] + k + shift - 1).clamp(0, t - 1)]


def slot_rows(rows: torch.Tensor, block_size: int, shift: int) -> torch.Tensor:
    """Valid-slot indices into A·B (DFlash's numbering, as ``packed.valid_rows`` gives them) as indices
    into A·(B-shift), the query slots of a kind whose block starts ``shift`` tokens later."""
    if not shift:
        return rows
    return (rows // block_size) * (block_size - shift) + rows % block_size - shift


def dflash_loss(
    drafter: nn.Module,
    *,
    taps: torch.Tensor,  # [1, T, n_taps*H] target features, computed with no grad
    input_ids: torch.Tensor,  # [T]
    loss_mask: torch.Tensor,  # [T] 1 on target-generated tokens
    anchors: torch.Tensor,  # [A] sorted anchor positions
    embed_weight: torch.Tensor,  # [V, H] the target's input embeddings (frozen)
    lm_head_weight: torch.Tensor,  # [V, H] the target's LM head (frozen)
    block_size: int,
    mask_token_id: int,
    weights: torch.Tensor,  # [B] from helpers.loss_weights (slot k of a shifted block weighs as k+shift)
    flex: bool = False,
    chunk: int = 4096,
    layout: L.Layout | None = None,
    rows: torch.Tensor | None = None,  # [N] flat indices (into A·B) of the valid slots, when known
    head_weight: float = 1.0,  # the kind's extra head loss (DSpark: confidence; DFlash2: selector)
    label_ids: torch.Tensor | None = None,  # [T] labels where they are not the tokens (greedy labels)
) -> StepOutput:
    """The block objective of any drafter kind on one sequence, or on a packed step when ``layout`` says
    which segment each position belongs to (the drafter may be DDP/FSDP-wrapped): the weighted per-slot
    loss of the kind's ``slot_terms`` (DFlash: the block cross-entropy), each slot given the TRUE token
    before it (teacher forcing, for the kinds whose heads read it). The loss is normalised by the summed
    weight of every label in the step, so each supervised token counts the same whichever sequence it
    comes from."""
    core = getattr(drafter, "module", drafter)  # the kind's heads, past a DDP wrapper
    assert isinstance(core, DFlashDraftModel)
    if anchors.numel() == 0:
        return no_blocks(drafter, block_size, taps.device)
    shift = int(core.query_shift)
    a = anchors.numel()
    s = block_size - shift  # query slots per block
    dev = taps.device
    hidden, labels, valid = block_hidden(
        drafter,
        taps,
        input_ids,
        loss_mask,
        anchors,
        embed_weight,
        block_size,
        mask_token_id,
        flex,
        layout,
        shift=shift,
        label_ids=label_ids,
    )
    # a boolean index is a nonzero: it waits for the device (the training loop passes host-side rows)
    rows = valid.flatten().nonzero().squeeze(1) if rows is None else slot_rows(rows, block_size, shift)
    rows = rows.to(dev, non_blocking=True)
    h = hidden.reshape(a * s, -1).index_select(0, rows)
    y = labels.flatten().index_select(0, rows)
    prev = tokens_before(input_ids, anchors, s, shift).flatten().index_select(0, rows)
    w = weights.to(dev)[shift:][None, :].expand(a, s).flatten().index_select(0, rows)
    losses, preds = [], []
    for i in range(0, h.shape[0], chunk):
        part = (Slots(h[i : i + chunk], prev[i : i + chunk], y[i : i + chunk]), lm_head_weight, head_weight)
        if torch.is_grad_enabled() and h.shape[0] > chunk:  # a chunk's [rows, V] logits, recomputed
            lo, pr = checkpoint(core.slot_terms, *part, use_reentrant=False)
        else:
            lo, pr = core.slot_terms(*part)
        losses.append(lo)
        preds.append(pr)
    loss_rows = torch.cat(losses) if losses else h.new_zeros(0)
    weight = w.sum().detach()
    loss = (loss_rows * w).sum() / weight.clamp_min(1e-9)
    pred_full = torch.full_like(labels, -1)
    if preds:
        pred_full.view(-1).index_copy_(0, rows, torch.cat(preds))
    pad = torch.zeros(a, shift, dtype=torch.long, device=dev)  # DFlash's slots before the query block
    padded = (torch.cat([pad, pred_full], 1), torch.cat([pad, labels], 1), torch.cat([pad.bool(), valid], 1))
    correct, total = H.per_position_accuracy(*padded)
    return StepOutput(
        accepted=H.accepted_lengths(*padded).detach(),
        loss=loss,
        correct=correct.detach(),
        total=total.detach(),
        n_anchors=a,
        n_labels=int(y.numel()),
        weight=weight,
    )


def no_blocks(drafter: nn.Module, block_size: int, device: torch.device) -> StepOutput:
    """A step with no anchored block (greedy labels on text that never follows the target's chain, a
    step without a supervised pair): a zero loss that still reaches every parameter, so a DDP backward
    sees the same parameters on every rank, and nothing counted."""
    zero = sum((p.sum() for p in drafter.parameters()), torch.zeros((), device=device)) * 0.0
    none = torch.zeros(block_size - 1, device=device)
    return StepOutput(
        loss=zero,
        correct=none,
        total=none.clone(),
        n_anchors=0,
        n_labels=0,
        weight=torch.zeros((), device=device),
        accepted=torch.zeros(0, dtype=torch.long, device=device),
    )
