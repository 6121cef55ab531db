"""DSpark: the DFlash block drafter plus a sequential Markov head and a confidence head.

A block drafter predicts every slot at once, so slot k cannot know what slot k-1 drafted; its tail is
where acceptance dies. DSpark keeps the parallel block and corrects each slot's logits with a rank-r
bigram bias from the token drafted before it, one cheap step per slot:

    logits_k = lm_head(h_k) + markov_w2(markov_w1[prev_k]),   prev_0 = the anchor, prev_k = draft_{k-1}

and a confidence head ``sigmoid(proj([h_k ; markov_w1[prev_k]]))`` estimates whether slot k is accepted
(a serving engine uses it to choose how much to verify).

The block differs from DFlash's by one slot: its N = num_speculative_tokens queries are [anchor, mask ×
(N-1)] at positions p..p+N-1, and query k predicts the token at p+k+1 (vLLM's ``sample_from_anchor``).
Here a DSpark drafter keeps the trainer's convention ``block_size`` = 1 + drafted tokens (what the
verification block holds), so its query block has ``block_size - 1`` slots; its ``config.json`` says
``block_size`` = N as vLLM's ``Qwen3DSparkModel`` reads it.

Checkpoint names are vLLM 0.32's ``Qwen3DSparkModel`` (``vllm/model_executor/models/qwen3_dspark.py``):
the DFlash backbone's, plus ``markov_head.markov_w1.weight`` [V, r], ``markov_head.markov_w2.weight``
[V, r] and ``confidence_head.proj.{weight [1, H + r], bias [1]}`` (float32); no embedding or LM head
(the target's are shared).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import Qwen3Config

from trainer.dflash import helpers as H
from trainer.dflash import layout as L
from trainer.dflash.model import DFlashDraftModel
from trainer.dflash.objective import StepOutput, block_hidden

ARCHITECTURE = "Qwen3DSparkModel"


class MarkovHead(nn.Module):
    def __init__(self, vocab_size: int, rank: int) -> None:
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab_size, rank)
        self.markov_w2 = nn.Linear(rank, vocab_size, bias=False)

    def embed(self, prev: torch.Tensor) -> torch.Tensor:
        return self.markov_w1(prev)

    def bias(self, e: torch.Tensor) -> torch.Tensor:
        return self.markov_w2(e)


class ConfidenceHead(nn.Module):
    def __init__(self, input_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(input_dim, 1, bias=True)

    def forward(self, hidden: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """Logit of slot acceptance ([N, H], [N, r] -> [N]), in float32 as vLLM computes it."""
        x = torch.cat([hidden, e], dim=-1).float()
        return F.linear(x, self.proj.weight.float(), self.proj.bias.float()).squeeze(-1)


class DSparkDraftModel(DFlashDraftModel):
    """The DFlash backbone (``forward`` as DFlash's) with the Markov and confidence heads."""

    kind = "dspark"

    def __init__(self, cfg: Qwen3Config, rope_style: str = "neox") -> None:
        super().__init__(cfg, rope_style)
        rank = int(cfg.markov_rank)
        self.block_size = int(cfg.block_size) + 1  # the trainer's B: the anchor + N drafted tokens
        self.query_slots = int(cfg.block_size)
        self.markov_head = MarkovHead(int(cfg.vocab_size), rank)
        self.confidence_head = ConfidenceHead(int(cfg.hidden_size) + rank)
        # The bias starts at zero: a fresh DSpark drafts exactly as its backbone does, and learns the
        # correction from there (the embedding is random so the first gradients reach it).
        nn.init.normal_(self.markov_head.markov_w1.weight, std=0.02)
        nn.init.zeros_(self.markov_head.markov_w2.weight)

    def slot_logits(
        self, hidden: torch.Tensor, prev: torch.Tensor, lm_head: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [N, V] float32, Markov embeddings [N, r]) of slots with hidden [N, H] after ``prev``."""
        e = self.markov_head.embed(prev)
        base = F.linear(hidden.to(lm_head.dtype), lm_head).float()
        return base + self.markov_head.bias(e.to(self.markov_head.markov_w2.weight.dtype)).float(), e


def dspark_config(cfg: Qwen3Config, markov_rank: int) -> Qwen3Config:
    """``cfg`` (a DFlash drafter config, block_size = 1 + drafted tokens) made a ``Qwen3DSparkModel``'s."""
    cfg.architectures = [ARCHITECTURE]
    cfg.block_size = int(cfg.block_size) - 1  # vLLM: query slots = num_speculative_tokens
    cfg.markov_rank = int(markov_rank)
    cfg.markov_head_type = "vanilla"
    cfg.enable_confidence_head = True
    cfg.confidence_head_with_markov = True
    cfg.sample_from_anchor = True
    # vLLM reads these at the top level for DSpark (dflash_config is read too, and says the same)
    cfg.mask_token_id = int(cfg.dflash_config["mask_token_id"])
    cfg.target_layer_ids = [int(i) for i in cfg.dflash_config["target_layer_ids"]]
    cfg.tie_word_embeddings = False
    return cfg


def _slot_terms(
    core: DSparkDraftModel, h: torch.Tensor, prev: torch.Tensor, y: torch.Tensor, lm_head: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per valid slot: cross-entropy of the corrected logits, the drafted token, the confidence logit."""
    logits, e = core.slot_logits(h, prev, lm_head)
    return F.cross_entropy(logits, y, reduction="none"), logits.argmax(-1), core.confidence_head(h, e)


def dspark_loss(
    drafter: nn.Module,
    *,
    taps: torch.Tensor,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    anchors: torch.Tensor,
    embed_weight: torch.Tensor,
    lm_head_weight: torch.Tensor,
    block_size: int,
    mask_token_id: int,
    weights: torch.Tensor,  # [B] from helpers.loss_weights: slot k of DSpark weighs as DFlash's slot k+1
    flex: bool = False,
    chunk: int = 4096,
    layout: L.Layout | None = None,
    rows: torch.Tensor | None = None,  # [N] flat indices into A·(B-1) of the valid slots, when known
    confidence_weight: float = 1.0,
) -> StepOutput:
    """DSpark's objective on one (packed) step: the Markov head trained with teacher forcing (slot k's
    bias comes from the TRUE token before it, the anchor for slot 0), the weighted cross-entropy of the
    corrected logits, plus ``confidence_weight`` × the binary cross-entropy of the confidence head
    against whether the slot's drafted token is the label (accepted, under greedy verification)."""
    a = anchors.numel()
    n = block_size - 1
    dev = taps.device
    hidden, labels, valid = block_hidden(
        drafter, taps, input_ids, loss_mask, anchors, embed_weight, block_size, mask_token_id, flex,
        layout, shift=1,
    )  # fmt: skip
    if rows is None:
        rows = valid.flatten().nonzero().squeeze(1)
    rows = rows.to(dev, non_blocking=True)
    core = getattr(drafter, "module", drafter)  # the heads, past a DDP wrapper
    assert isinstance(core, DSparkDraftModel)
    t = input_ids.shape[0]
    prev = input_ids[(anchors[:, None] + torch.arange(n, device=dev)[None, :]).clamp(max=t - 1)]
    h = hidden.reshape(a * n, -1).index_select(0, rows)
    y = labels.flatten().index_select(0, rows)
    p = prev.flatten().index_select(0, rows)
    w = weights.to(dev)[1:][None, :].expand(a, n).flatten().index_select(0, rows)
    ces, preds, confs = [], [], []
    for s in range(0, h.shape[0], chunk):
        part = (core, h[s : s + chunk], p[s : s + chunk], y[s : s + chunk], lm_head_weight)
        if torch.is_grad_enabled() and h.shape[0] > chunk:  # a chunk's [rows, V] logits, recomputed
            ce, pr, cf = checkpoint(_slot_terms, *part, use_reentrant=False)
        else:
            ce, pr, cf = _slot_terms(*part)
        ces.append(ce)
        preds.append(pr)
        confs.append(cf)
    ce = torch.cat(ces) if ces else h.new_zeros(0)
    pred = torch.cat(preds) if preds else y.new_zeros(0)
    conf = torch.cat(confs) if confs else h.new_zeros(0).float()
    weight = w.sum().detach()
    accepted = (pred == y).float().detach()
    bce = F.binary_cross_entropy_with_logits(conf, accepted, reduction="none")
    loss = ((ce + confidence_weight * bce) * w).sum() / weight.clamp_min(1e-9)
    pred_full = torch.full_like(labels, -1)
    if preds:
        pred_full.view(-1).index_copy_(0, rows, pred)
    pad = torch.zeros(a, 1, dtype=torch.bool, device=dev)  # DFlash's slot 0: never a label
    correct, total = H.per_position_accuracy(
        torch.cat([pad.long(), pred_full], 1), torch.cat([pad.long(), labels], 1), torch.cat([pad, valid], 1)
    )
    return StepOutput(loss, correct.detach(), total.detach(), a, int(y.numel()), weight)


def dspark_rows(rows: torch.Tensor, block_size: int) -> torch.Tensor:
    """DFlash's valid-slot indices (into A·B, slot 0 never among them) as DSpark's (into A·(B-1))."""
    return (rows // block_size) * (block_size - 1) + rows % block_size - 1
