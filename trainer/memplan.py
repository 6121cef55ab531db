"""`python -m trainer plan-memory`: a rank's peak GPU memory for a run config and a target, by part, and the
largest `step_anchors` and `max_len` that fit — before any GPU is rented.

The drafter's training step is run for real, on fake tensors: `FakeTensorMode` gives every tensor its
shape and dtype but no storage and no compute, and torch's `MemTracker` counts what would be alive, so a
Qwen3-8B-shaped step takes seconds on a laptop. It is the loop's own step (`dflash_loss` under bf16
autocast: the anchored blocks, the LM head in chunks, backward, AdamW), except flex attention, which the
tracker cannot follow: a stand-in allocates what the fused kernel keeps (its output and log-sum-exp,
saved for backward; the kernel never materialises queries × keys, nor does the compiled block mask).

Added beside the step, from the configs: the frozen target (every weight when it runs in-process, its
embedding and head when features come from files or vLLM), its KV cache and one layer's transient while
it computes a step's features (before the drafter's step, so the larger of the two counts), the step's
features, and an allowance for the CUDA context and the allocator's slack.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, Qwen3Config

from trainer.config import TrainConfig
from trainer.dflash import compiled
from trainer.dflash import helpers as H
from trainer.dflash import layout as L
from trainer.dflash.config import make_draft_config
from trainer.dflash.kinds import KINDS
from trainer.dflash.objective import dflash_loss
from trainer.drafting import kind_config
from trainer.sources.select import kind_of

GIB = 2**30
CONTEXT_GIB = 1.5  # CUDA context, cuBLAS/NCCL workspaces and allocator slack: an allowance, not a measure
# Public shapes of targets users train for, so a plan needs no download (any HF folder works too).
_QWEN3: dict[str, Any] = {
    "vocab_size": 151936,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rope_theta": 1_000_000.0,
    "tie_word_embeddings": False,
}
PRESETS: dict[str, dict[str, Any]] = {  # layers, heads, hidden, intermediate
    name: {
        **_QWEN3,
        "num_hidden_layers": n,
        "num_attention_heads": h,
        "hidden_size": d,
        "intermediate_size": f,
    }
    for name, (n, h, d, f) in {"qwen3-8b": (36, 32, 4096, 12288), "qwen3-32b": (64, 64, 5120, 25600)}.items()
}


def target_config(spec: str) -> PretrainedConfig:
    """A preset's name, or a Hugging Face model folder (its config.json only: no weights are read)."""
    if spec.lower() in PRESETS:
        return Qwen3Config(**PRESETS[spec.lower()])
    try:
        return AutoConfig.from_pretrained(spec)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"target {spec!r}: neither a preset ({', '.join(PRESETS)}) nor a folder with a config.json"
        ) from exc


def step_anchor_count(cfg: TrainConfig) -> int:
    """The anchors of the largest step: `max_len` positions all supervised (`packed.sample_anchors`)."""
    per = cfg.anchors * math.ceil(cfg.max_len / cfg.anchor_tokens) if cfg.anchor_tokens else cfg.anchors
    return min(per, cfg.step_anchors) if cfg.step_anchors else per


class _FusedAttention(torch.autograd.Function):
    """What flex attention's fused kernel allocates: forward keeps q, k, v, its output and log-sum-exp."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, lse = torch.empty_like(q), q.new_empty(q.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **_: Any) -> torch.Tensor:
    return _FusedAttention.apply(q, k, v)


@dataclass
class Plan:
    """Bytes per rank by part; `total` is the predicted peak."""

    parts: dict[str, float] = field(default_factory=dict)
    step: dict[str, float] = field(default_factory=dict)  # the drafter step's peak, by tracker category

    @property
    def total(self) -> float:
        return sum(self.parts.values())


def drafter_step(
    cfg: TrainConfig, tcfg: PretrainedConfig, gpus: int = 1, fake: bool = True
) -> dict[str, float]:
    """The drafter step's peak by MemTracker category (PARAM, GRAD, OPT, ACT, TEMP), on fake tensors (or,
    `fake=False`, real ones: what the tests measure the prediction against); the drafter's weights,
    gradients and AdamW states divided over `gpus` ranks under FSDP."""
    b, t, a = cfg.block_size, cfg.max_len, step_anchor_count(cfg)
    base = make_draft_config(
        tcfg,
        num_hidden_layers=cfg.num_layers,
        block_size=b,
        mask_token_id=0,
        target_layer_ids=cfg.target_layer_ids,
        intermediate_size=cfg.intermediate_size,
    )
    dcfg = kind_config(cfg, base)
    dev = torch.device("cpu")  # sizes do not depend on the device; fake tensors allocate nothing anyway
    layout = L.Layout.build([t], [0], L.block_diagonal([L.chain_share([0])]), dev)
    anchors = torch.arange(a) * max(1, (t - b) // a)
    rows = (torch.arange(a)[:, None] * b + torch.arange(1, b)[None]).flatten()
    amp = cfg.mixed_precision != "no"
    saved = dict(compiled._COMPILED), set(compiled.COMPILE_ON)
    compiled.COMPILE_ON.add("cpu")
    compiled._COMPILED[("flex_attention", "cpu")] = _fused
    compiled._COMPILED[("create_block_mask", "cpu")] = lambda *a, **k: object()  # size: negligible
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext():
            drafter = KINDS[cfg.drafter].model(dcfg)
            drafter.checkpoint_layers = cfg.activation_checkpointing
            opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr)
            width = len(drafter.target_layer_ids) * tcfg.hidden_size
            taps = torch.empty(1, t, width, dtype=torch.bfloat16 if amp else torch.float32)
            head = torch.empty(tcfg.vocab_size, tcfg.hidden_size, dtype=taps.dtype)
            ids, mask = torch.zeros(t, dtype=torch.long), torch.ones(t, dtype=torch.long)
            tracker = MemTracker()
            tracker.track_external(drafter, opt)
            with tracker:
                for n in range(2):  # the second step: with AdamW's states, as every later one
                    if n:
                        tracker.reset_mod_stats()
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                        out = dflash_loss(
                            drafter,
                            taps=taps,
                            input_ids=ids,
                            loss_mask=mask,
                            anchors=anchors,
                            embed_weight=head,
                            lm_head_weight=head,
                            block_size=b,
                            mask_token_id=0,
                            weights=H.loss_weights(b, cfg.gamma or H.default_gamma(b)),
                            flex=True,
                            layout=layout,
                            rows=rows,
                        )
                    out.loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
    finally:
        compiled._COMPILED.clear()
        compiled._COMPILED.update(saved[0])
        compiled.COMPILE_ON.clear()
        compiled.COMPILE_ON.update(saved[1])
    peak = {
        str(k).rsplit(".", 1)[-1]: float(v)
        for by_device in tracker.get_tracker_snapshot("peak").values()
        for k, v in by_device.items()
        if v and str(k) != "Total"
    }
    if cfg.launch.accelerate == "fsdp" and gpus > 1:
        for k in ("PARAM", "GRAD", "OPT"):
            peak[k] = peak.get(k, 0.0) / gpus
    return peak


def plan(cfg: TrainConfig, tcfg: PretrainedConfig, gpus: int = 1) -> Plan:
    """The peak per rank of `cfg` training a drafter for a target of config `tcfg` on `gpus` GPUs."""
    with torch.device("meta"):  # its parameter count, nothing allocated
        target = AutoModelForCausalLM.from_config(tcfg)
    per = 2 if cfg.mixed_precision != "no" else 4  # the target is read straight into the training dtype
    shared = tcfg.vocab_size * tcfg.hidden_size * (1 if tcfg.tie_word_embeddings else 2)
    in_process = kind_of(cfg.feature_source).in_process
    weights = sum(p.numel() for p in target.parameters()) if in_process else shared
    step = drafter_step(cfg, tcfg, gpus)
    n_taps = len(cfg.target_layer_ids or [0] * cfg.num_layers)
    p = Plan(step=step)
    p.parts["target weights"] = weights * per
    p.parts["drafter weights, gradients, AdamW"] = sum(step.get(k, 0.0) for k in ("PARAM", "GRAD", "OPT"))
    transient = sum(step.get(k, 0.0) for k in ("ACT", "TEMP", "INP", "BUFFER"))
    p.parts["step activations and LM-head chunk"] = transient
    if in_process:  # the target's pass over the step's positions, before the drafter's step
        heads = int(getattr(tcfg, "num_key_value_heads", tcfg.num_attention_heads))
        head_dim = int(getattr(tcfg, "head_dim", None) or tcfg.hidden_size // tcfg.num_attention_heads)
        kv = tcfg.num_hidden_layers * 2 * heads * head_dim * cfg.max_len * per
        layer = cfg.max_len * (4 * tcfg.hidden_size + 3 * tcfg.intermediate_size) * per
        p.parts["target KV cache and layer, beyond the step's"] = max(0.0, kv + layer - transient)
    p.parts["step features"] = cfg.max_len * n_taps * tcfg.hidden_size * per
    p.parts["CUDA context and slack (allowance)"] = CONTEXT_GIB * GIB
    return p


def largest(cfg: TrainConfig, tcfg: PretrainedConfig, key: str, budget: float, gpus: int = 1) -> int:
    """About the largest value of `key` (step_anchors or max_len) whose plan fits `budget` bytes, to a
    multiple of 128 (0: none). Memory grows linearly in both (fused attention): the line through two plans
    gives a guess, lowered 5 % at a time until its own plan fits."""

    def total(x: int) -> float:
        update: dict[str, Any] = {key: x}
        if key == "step_anchors":  # x anchors in the step, whatever the per-sequence rate would draw
            update.update(anchors=x, anchor_tokens=None)
        return plan(cfg.model_copy(update=update), tcfg, gpus).total

    x0 = int(getattr(cfg, key) or step_anchor_count(cfg))
    f0, f1 = total(x0), total(2 * x0)
    slope = max((f1 - f0) / x0, 1.0)
    guess = int(x0 + (budget - f0) / slope) // 128 * 128
    if key == "max_len":  # no longer than the target reads
        guess = min(guess, int(getattr(tcfg, "max_position_embeddings", guess)))
    for _ in range(20):
        if guess <= 0 or total(guess) <= budget:
            return max(guess, 0)
        guess = int(guess * 0.95) // 128 * 128
    return 0
