"""The DFlash drafter: N Qwen3-style layers conditioned on the target's tapped hidden states.

Parameter names and shapes are those of released ``DFlashDraftModel`` checkpoints::

    fc.weight                    [H, len(target_layer_ids) * H]   (no bias)
    hidden_norm.weight           [H]
    layers.{i}.input_layernorm.weight, layers.{i}.post_attention_layernorm.weight
    layers.{i}.self_attn.{q,k,v,o}_proj.weight, layers.{i}.self_attn.{q,k}_norm.weight [head_dim]
    layers.{i}.mlp.{gate,up,down}_proj.weight
    norm.weight

There is no embedding and no LM head: the target's, frozen, are used (``embed`` in and ``lm_head`` out).

In each layer the queries come from the block only; keys and values are ``k_proj``/``v_proj`` of
[context features ; block], both through ``k_norm`` and RoPE at their absolute positions; attention is
not causal. The context features are ``hidden_norm(fc(concat(taps)))`` of every position the target has
already processed before the block's anchor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import Qwen3Config
from transformers.activations import ACT2FN
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

from trainer.dflash import compiled
from trainer.dflash import config as dcfg
from trainer.dflash.attention import DocumentMask, dense_attention

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FLOAT32_HEADS = ("confidence_head.",)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str = "neox") -> torch.Tensor:
    """Apply RoPE. ``cos``/``sin`` are [.., T, head_dim] in the Hugging Face layout (two equal halves).

    ``neox`` rotates the two halves of the head against each other (Hugging Face ``rotate_half``, vLLM
    ``is_neox_style=True``); ``interleaved`` rotates adjacent pairs (GPT-J, vLLM ``is_neox_style=False``).
    The drafter must use the target's style or every drafted Q/K is wrong, silently.
    """
    if style == "neox":
        half = x.shape[-1] // 2
        rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rot * sin
    if style == "interleaved":
        half = x.shape[-1] // 2
        c = cos[..., :half].repeat_interleave(2, dim=-1)
        s = sin[..., :half].repeat_interleave(2, dim=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
        return x * c + rot * s
    raise ValueError(f"unknown RoPE style {style!r}; one of {dcfg.ROPE_STYLES}")


class Slots(NamedTuple):
    """N query slots of a block objective, one row each: what a kind's ``slot_terms`` scores."""

    hidden: torch.Tensor  # [N, H]: the drafter's hidden state of the slot
    prev: torch.Tensor  # [N]: the TRUE token before the slot (teacher forcing)
    labels: torch.Tensor  # [N]: the token the slot should draft


@dataclass
class DraftCache:
    """Per-layer K/V of the context features seen so far (already normed and rotated), for decoding."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0


class DFlashAttention(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.num_heads = int(cfg.num_attention_heads)
        self.num_kv_heads = int(cfg.num_key_value_heads or self.num_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or h // self.num_heads)
        bias = bool(getattr(cfg, "attention_bias", False))
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.scaling = self.head_dim**-0.5

    def _kv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return rotate(k, cos[:, None], sin[:, None], style), v

    def forward(
        self,
        x: torch.Tensor,  # [b, Q, H] block hidden (after input_layernorm)
        ctx: torch.Tensor,  # [b, C, H] context features (hidden_norm(fc(taps))), C may be 0
        rope_q: tuple[torch.Tensor, torch.Tensor],  # cos/sin [b, Q, d]
        rope_ctx: tuple[torch.Tensor, torch.Tensor],  # cos/sin [b, C, d]
        mask: torch.Tensor | object | None,  # [Q, P+C+Q] bool, a DocumentMask, a flex BlockMask, None = all
        style: str,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,  # cached context K/V [b, kvh, P, d]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, q_len, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.num_heads, self.head_dim)).transpose(1, 2)
        q = rotate(q, rope_q[0][:, None], rope_q[1][:, None], style)
        k_ctx, v_ctx = self._kv(ctx, *rope_ctx, style)
        if past is not None:
            k_ctx = torch.cat([past[0], k_ctx], dim=2)
            v_ctx = torch.cat([past[1], v_ctx], dim=2)
        k_blk, v_blk = self._kv(x, *rope_q, style)
        k = torch.cat([k_ctx, k_blk], dim=2)
        v = torch.cat([v_ctx, v_blk], dim=2)
        # Under bf16 autocast the projections are bf16 but the q/k norms (a float32 weight times the
        # input) give float32; flex attention before torch 2.10 refuses mixed dtypes. One dtype: v's.
        q, k = q.to(v.dtype), k.to(v.dtype)
        if mask is not None and not isinstance(mask, torch.Tensor | DocumentMask):
            out = compiled.attention(q.device)(q, k, v, block_mask=mask, scale=self.scaling, enable_gqa=True)
        else:
            rep = self.num_heads // self.num_kv_heads
            if rep > 1:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            out = dense_attention(q, k, v, mask, self.scaling)
        out = out.transpose(1, 2).reshape(b, q_len, -1)
        return self.o_proj(out), (k_ctx, v_ctx)


class DFlashMLP(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = ACT2FN[cfg.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DFlashDecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.self_attn = DFlashAttention(cfg)
        self.mlp = DFlashMLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, ctx, rope_q, rope_ctx, mask, style, past=None):  # type: ignore[no-untyped-def]
        attn, kv = self.self_attn(self.input_layernorm(x), ctx, rope_q, rope_ctx, mask, style, past)
        x = x + attn
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, kv


class DFlashDraftModel(nn.Module):
    """The drafter. ``forward`` returns final-normed hidden states of the block; apply the target's LM head.

    A kind that extends it (trainer/dflash/kinds.py) may change its layer (``layer_cls``), its query block
    (``query_shift``: DSpark's slots start one token later) and how a slot's hidden state becomes the loss
    and the drafted token (``slot_terms``); the objective and the engine ask these, never the kind's name.
    """

    layer_cls: type[nn.Module] = DFlashDecoderLayer
    query_shift = 0
    # Training: recompute each layer in backward, so one layer's activations are alive at a time, not
    # all of them (≈ 8.7 GiB per layer at 32k query slots of a Qwen3-8B drafter; `trainer plan-memory`).
    checkpoint_layers = False

    def __init__(self, cfg: Qwen3Config, rope_style: str = "neox") -> None:
        super().__init__()
        if rope_style not in dcfg.ROPE_STYLES:
            raise ValueError(f"rope_style must be one of {dcfg.ROPE_STYLES}")
        self.config = cfg
        self.rope_style = rope_style
        self.target_layer_ids = dcfg.target_layer_ids(cfg)
        self.mask_token_id = dcfg.mask_token_id(cfg)
        self.block_size = int(cfg.block_size)
        h = cfg.hidden_size
        self.layers = nn.ModuleList([self.layer_cls(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(h, cfg.rms_norm_eps)
        self.fc = nn.Linear(len(self.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(cfg)  # inv_freq is a non-persistent buffer: not saved
        self._init_weights(float(getattr(cfg, "initializer_range", 0.02)))

    def _init_weights(self, std: float) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def rope(self, ref: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.rotary_emb(ref, position_ids)
        return cos.to(ref.dtype), sin.to(ref.dtype)

    def project_context(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """[b, C, n_taps*H] concatenated taps -> [b, C, H] context features."""
        return self.hidden_norm(self.fc(target_hidden))

    def forward(
        self,
        noise_embedding: torch.Tensor,  # [b, Q, H]: target embeddings of the block ids
        target_hidden: torch.Tensor,  # [b, C, n_taps*H]: taps of the context positions
        position_ids: torch.Tensor,  # [b, C+Q]: positions of the context, then of the block slots
        attention_mask: torch.Tensor | object | None = None,  # [Q, C+Q] bool / BlockMask / None
        cache: DraftCache | None = None,
    ) -> torch.Tensor:
        """One drafter pass. With ``cache``, ``target_hidden`` holds only the context positions that are
        new since the last call; their K/V are appended to the cache and the block attends to all of it."""
        q_len = noise_embedding.shape[1]
        ctx = self.project_context(target_hidden)
        cos, sin = self.rope(noise_embedding, position_ids)
        c = ctx.shape[1]
        rope_ctx = (cos[:, :c], sin[:, :c])
        rope_q = (cos[:, c : c + q_len], sin[:, c : c + q_len])
        x = noise_embedding
        for i, layer in enumerate(self.layers):
            past = None
            if cache is not None and cache.length:
                past = (cache.keys[i], cache.values[i])
            args = (x, ctx, rope_q, rope_ctx, attention_mask, self.rope_style, past)
            if self.checkpoint_layers and cache is None and torch.is_grad_enabled():
                x, (k_ctx, v_ctx) = checkpoint(layer, *args, use_reentrant=False)
            else:
                x, (k_ctx, v_ctx) = layer(*args)
            if cache is not None:
                if i < len(cache.keys):
                    cache.keys[i], cache.values[i] = k_ctx, v_ctx
                else:
                    cache.keys.append(k_ctx)
                    cache.values.append(v_ctx)
        if cache is not None:
            cache.length += c
        return self.norm(x)

    def slot_terms(
        self, slots: Slots, lm_head: torch.Tensor, head_weight: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per slot: (loss [N], drafted token [N]). DFlash: the cross-entropy of the target's LM head over
        the slot. The head's matmul runs in the head's dtype, as the serving engine runs it (the drafter's
        output is fp32 under mixed precision), the cross-entropy in fp32."""
        logits = F.linear(slots.hidden.to(lm_head.dtype), lm_head).float()
        return F.cross_entropy(logits, slots.labels, reduction="none"), logits.argmax(-1)

    # -- checkpoint format -------------------------------------------------------------------------
    def save(self, out_dir: str | Path, dtype: torch.dtype | None = None) -> Path:
        """Write ``config.json`` + ``model.safetensors`` in the released DFlash layout."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        # a head a serving engine computes in float32 (DSpark's confidence) is stored so
        state = {
            k: v.detach().to(v.dtype if k.startswith(FLOAT32_HEADS) else dtype or v.dtype).contiguous().cpu()
            for k, v in self.state_dict().items()
        }
        save_file(state, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
        d = dcfg.config_dict(self.config)
        d["dtype"] = str(state["fc.weight"].dtype).replace("torch.", "")
        (out / CONFIG_NAME).write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
        return out

    @classmethod
    def load(
        cls, path: str | Path, rope_style: str = "neox", device: str | torch.device = "cpu"
    ) -> DFlashDraftModel:
        p = Path(path)
        cfg = dcfg.config_from_dict(json.loads((p / CONFIG_NAME).read_text()))
        model = cls(cfg, rope_style=rope_style)
        state = load_file(str(p / WEIGHTS_NAME), device=str(device))
        model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
        return model.to(device)
