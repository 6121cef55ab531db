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

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3Config

from trainer.dflash.model import DFlashDraftModel, Slots

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
    query_shift = 1  # its queries are [anchor, mask...]: slot k predicts the token DFlash's slot k+1 does

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

    def slot_terms(
        self, slots: Slots, lm_head: torch.Tensor, head_weight: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """DSpark's objective per slot: the cross-entropy of the corrected logits, the Markov bias taken
        from the TRUE token before the slot (teacher forcing; the anchor for slot 0), plus ``head_weight``
        × the binary cross-entropy of the confidence head against whether the slot's drafted token is the
        label (accepted, under greedy verification)."""
        hidden, prev, labels = slots
        logits, e = self.slot_logits(hidden, prev, lm_head)
        pred = logits.argmax(-1)
        accepted = (pred == labels).float().detach()
        bce = F.binary_cross_entropy_with_logits(self.confidence_head(hidden, e), accepted, reduction="none")
        return F.cross_entropy(logits, labels, reduction="none") + head_weight * bce, pred


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


def configure(cfg: Qwen3Config, knobs: Any) -> Qwen3Config:
    """The kind's config from the run's knobs (a `TrainConfig`: its head_rank)."""
    return dspark_config(cfg, knobs.head_rank)


def card(config: dict[str, Any], drafts: int) -> list[str]:
    """What the model card says of this kind."""
    return [
        f"DSpark: the block's {drafts} query slots are corrected slot by slot by a rank-"
        f"{config.get('markov_rank')} Markov head, and a confidence head scores each slot. vLLM serves "
        "it on its V2 model runner (GPUs); vLLM CPU 0.32 cannot (no V1 support, no Triton on CPU).",
        "",
    ]
