"""DFlash2: the DFlash block drafter with a two-tap convolution around each sub-layer and a candidate
selector that makes the block's drafts a path, not independent guesses.

A block drafter scores every slot at once, so slot k cannot know what slot k-1 drafted. DFlash2 answers
twice:

- **Grouped convolution.** Each layer's attention and MLP input is mixed with the ``taps - 1`` slots
  before it in the block (causal within the block), with per-row coefficients: a learned base kernel plus
  a per-group delta projected from the row itself, and once more on the sub-layer's output::

      conv(x)[i] = sum_t (base[t] + delta_i[t, group]) * x[i - t]      (t ≤ position of i in its block)

- **Candidate selector.** Each slot keeps its top-k tokens under the target's LM head (the unary
  logits); a rank-r bilinear score re-ranks them by the token drafted before it::

      score_k(prev, c) = unary_k(c) + < P[prev] * W h_k , S[c] >

  and the drafts are a walk: slot 1 after the anchor, slot k after slot k-1's choice.

Both start as the identity (the base kernel's first tap 1, every delta and the selector's projection 0),
so a fresh DFlash2 drafts exactly as its DFlash backbone; training moves them from there. The selector is
trained with teacher forcing: slot k's score reads the TRUE token before it; over the whole vocabulary the
score is the unary logits plus a rank-r bias, so its cross-entropy (beside the backbone's own, which keeps
the right token among the top-k) costs one [N, r] × [r, V] product.

Checkpoint names are vLLM 0.32's ``DFlash2Qwen3ForCausalLM`` (``vllm/model_executor/models/
qwen3_dflash2.py``, architecture ``DFlash2DraftModel``, served with ``method: dflash``): DFlash's, plus
``layers.{i}.{attention,mlp}_conv.base_kernel`` [2, taps, H], ``layers.{i}.{attention,mlp}_conv.
kernel_projection.weight`` [2·taps·H/g, H], ``candidate_selector.{predecessor,successor}_codebook``
[V, r] and ``candidate_selector.hidden_projection.weight`` [r, H]; ``dflash_config`` carries
``conv_kernel_size``, ``conv_group_size``, ``selector_rank`` and ``selector_top_k``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3Config

from trainer.dflash.model import DFlashDecoderLayer, DFlashDraftModel, Slots

ARCHITECTURE = "DFlash2DraftModel"


class GroupedConv(nn.Module):
    """The causal in-block convolution of one sub-layer, before (``prepare``) and after (``finish``) it."""

    def __init__(self, hidden: int, taps: int, group_size: int, block_size: int) -> None:
        super().__init__()
        if hidden % group_size:
            raise ValueError(f"conv_group_size={group_size} must divide the hidden size {hidden}")
        self.taps, self.group_size, self.block_size = taps, group_size, block_size
        self.groups = hidden // group_size
        self.base_kernel = nn.Parameter(torch.zeros(2, taps, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * taps * self.groups, bias=False)
        self.reset_identity()

    def reset_identity(self) -> None:
        with torch.no_grad():
            self.base_kernel.zero_()
            self.base_kernel[:, 0] = 1.0
            self.kernel_projection.weight.zero_()

    def _convolve(self, x: torch.Tensor, delta: torch.Tensor, side: int) -> torch.Tensor:
        """x [b, T, H] (blocks of ``block_size`` rows, one after another), delta [b, T, taps, G]."""
        t = x.shape[1]
        blocks = x.unflatten(-1, (self.groups, self.group_size))  # [b, T, G, g]
        base = self.base_kernel[side].view(1, 1, self.taps, self.groups, self.group_size)
        coef = (base + delta.unsqueeze(-1)).to(x.dtype)  # [b, T, taps, G, g]
        position = torch.arange(t, device=x.device) % self.block_size
        out = coef[:, :, 0] * blocks
        for tap in range(1, self.taps):
            shifted = F.pad(blocks[:, :-tap], (0, 0, 0, 0, tap, 0))  # row i holds row i - tap
            out = out + coef[:, :, tap] * shifted * (position >= tap).view(1, -1, 1, 1).to(x.dtype)
        return out.flatten(-2)

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.kernel_projection(x).unflatten(-1, (2, self.taps, self.groups))  # [b, T, 2, taps, G]
        return self._convolve(x, c[:, :, 0], 0), c[:, :, 1]

    def finish(self, x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        return self._convolve(x, delta, 1)


class DFlash2DecoderLayer(DFlashDecoderLayer):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__(cfg)
        d = cfg.dflash_config
        args = (
            int(cfg.hidden_size),
            int(d["conv_kernel_size"]),
            int(d["conv_group_size"]),
            int(cfg.block_size),
        )
        self.attention_conv = GroupedConv(*args)
        self.mlp_conv = GroupedConv(*args)

    def forward(self, x, ctx, rope_q, rope_ctx, mask, style, past=None):  # type: ignore[no-untyped-def]
        h, delta = self.attention_conv.prepare(self.input_layernorm(x))
        attn, kv = self.self_attn(h, ctx, rope_q, rope_ctx, mask, style, past)
        x = x + self.attention_conv.finish(attn, delta)
        h, delta = self.mlp_conv.prepare(self.post_attention_layernorm(x))
        x = x + self.mlp_conv.finish(self.mlp(h), delta)
        return x, kv


class CandidateSelector(nn.Module):
    def __init__(self, hidden: int, vocab: int, rank: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.predecessor_codebook = nn.Parameter(torch.randn(vocab, rank) * 0.02)
        self.successor_codebook = nn.Parameter(torch.randn(vocab, rank) * 0.02)
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        nn.init.zeros_(self.hidden_projection.weight)  # no bias at first: the backbone's own ranking

    def query(self, hidden: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """[N, r]: the slot's side of the bilinear score, after the token ``prev`` [N]."""
        return self.predecessor_codebook[prev] * self.hidden_projection(
            hidden.to(self.hidden_projection.weight.dtype)
        )

    def bias(self, query: torch.Tensor, candidates: torch.Tensor | None = None) -> torch.Tensor:
        """The score added to the unary logits: over the whole vocabulary [N, V], or over ``candidates``
        [N, K] only (what the serving walk computes)."""
        if candidates is None:
            return (query @ self.successor_codebook.t()).float()
        return torch.einsum("nr,nkr->nk", query, self.successor_codebook[candidates]).float()


class DFlash2DraftModel(DFlashDraftModel):
    kind = "dflash2"
    layer_cls = DFlash2DecoderLayer

    def __init__(self, cfg: Qwen3Config, rope_style: str = "neox") -> None:
        super().__init__(cfg, rope_style)
        for conv in self.modules():  # DFlash's init drew every Linear at random: back to the identity
            if isinstance(conv, GroupedConv):
                conv.reset_identity()
        d = cfg.dflash_config
        self.candidate_selector = CandidateSelector(
            int(cfg.hidden_size), int(cfg.vocab_size), int(d["selector_rank"]), int(d["selector_top_k"])
        )

    def set_block(self, block_size: int) -> None:
        """Serve with another block than trained (vLLM: 1 + num_speculative_tokens rows per request)."""
        for conv in self.modules():
            if isinstance(conv, GroupedConv):
                conv.block_size = int(block_size)

    def slot_terms(
        self, slots: Slots, lm_head: torch.Tensor, head_weight: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's cross-entropy (it must keep the label among the top-k candidates) plus
        ``head_weight`` × the selector's over the vocabulary, with the TRUE token before the slot; the
        drafted token is the best-scored of the top-k, as the walk picks it after a correct prefix."""
        hidden, prev, labels = slots
        unary = F.linear(hidden.to(lm_head.dtype), lm_head).float()
        scored = unary + self.candidate_selector.bias(self.candidate_selector.query(hidden, prev))
        top = unary.topk(self.candidate_selector.top_k, dim=-1).indices
        pred = top.gather(-1, scored.gather(-1, top).argmax(-1, keepdim=True)).squeeze(-1)
        ce = F.cross_entropy(unary, labels, reduction="none")
        return ce + head_weight * F.cross_entropy(scored, labels, reduction="none"), pred

    def candidates(self, hidden: torch.Tensor, lm_head: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(candidate ids [N, K], their unary logits [N, K]) of slots with hidden [N, H]."""
        unary = F.linear(hidden.to(lm_head.dtype), lm_head).float()
        logits, ids = unary.topk(self.candidate_selector.top_k, dim=-1)
        return ids, logits

    def scores(
        self, hidden: torch.Tensor, prev: torch.Tensor, ids: torch.Tensor, unary: torch.Tensor
    ) -> torch.Tensor:
        """[N, K]: the candidates' scores after ``prev`` [N] (one step of the walk)."""
        return unary + self.candidate_selector.bias(self.candidate_selector.query(hidden, prev), ids)


def dflash2_config(
    cfg: Qwen3Config, *, conv_kernel_size: int, conv_group_size: int, selector_rank: int, selector_top_k: int
) -> Qwen3Config:
    """``cfg`` (a DFlash drafter config) made a ``DFlash2DraftModel``'s: vLLM reads the four fields from
    ``dflash_config``; the block stays DFlash's (anchor + num_speculative_tokens masks)."""
    if int(cfg.hidden_size) % conv_group_size:
        raise ValueError(
            f"conv_group_size={conv_group_size} must divide the target's hidden size {cfg.hidden_size}"
        )
    if not 1 <= selector_top_k <= int(cfg.vocab_size):
        raise ValueError(
            f"selector_top_k={selector_top_k} must be between 1 and the vocabulary {cfg.vocab_size}"
        )
    cfg.architectures = [ARCHITECTURE]
    cfg.dflash_config = {
        **cfg.dflash_config,
        "conv_kernel_size": int(conv_kernel_size),
        "conv_group_size": int(conv_group_size),
        "selector_rank": int(selector_rank),
        "selector_top_k": int(selector_top_k),
    }
    return cfg


def configure(cfg: Qwen3Config, knobs: Any) -> Qwen3Config:
    """The kind's config from the run's knobs (a `TrainConfig`: its conv_* and selector fields)."""
    return dflash2_config(
        cfg,
        conv_kernel_size=knobs.conv_kernel_size,
        conv_group_size=knobs.conv_group_size,
        selector_rank=knobs.head_rank,
        selector_top_k=knobs.selector_top_k,
    )


def card(config: dict[str, Any], drafts: int) -> list[str]:
    """What the model card says of this kind."""
    d = config["dflash_config"]
    return [
        f"DFlash2: a {d['conv_kernel_size']}-tap in-block convolution around each attention and MLP, and a "
        f"rank-{d['selector_rank']} candidate selector that walks each slot's top-{d['selector_top_k']} "
        "candidates after the token chosen before it. vLLM serves it with `method: dflash` on its V2 "
        "model runner (GPUs); vLLM CPU 0.32 cannot (its V1 runner refuses candidate-head drafts).",
        "",
    ]
