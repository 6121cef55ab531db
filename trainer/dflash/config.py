"""The drafter's ``config.json``: a Qwen3 config plus the fields released ``DFlashDraftModel`` checkpoints carry.

A released drafter (e.g. a Qwen3-8B DFlash b16) has ``"architectures": ["DFlashDraftModel"]``,
``"model_type": "qwen3"``, top-level ``block_size``, ``num_target_layers`` and ``num_hidden_layers``
(the drafter's own depth), and ``"dflash_config": {"mask_token_id": ..., "target_layer_ids": [...]}``,
next to the usual Qwen3 fields. The widths, vocabulary, norm epsilon and RoPE parameters are the
target's: the drafter runs on the target's embeddings and LM head and its positions must rotate exactly
as the target's do.
"""

from __future__ import annotations

import contextlib
from typing import Any

from transformers import PretrainedConfig, Qwen3Config

from trainer.dflash.helpers import default_target_layer_ids

ARCHITECTURE = "DFlashDraftModel"
# The drafter kinds a config may name (trainer/dflash/kinds.py maps them to their models).
ARCHITECTURES = ("DFlashDraftModel", "DFlash2DraftModel", "Qwen3DSparkModel")
# Keys a loader (vLLM, SGLang, the reference implementation) reads; export is checked against these.
REQUIRED_KEYS = (
    "architectures",
    "model_type",
    "block_size",
    "num_target_layers",
    "num_hidden_layers",
    "dflash_config",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "vocab_size",
    "max_position_embeddings",
)
ROPE_STYLES = ("neox", "interleaved")


def _rope_parameters(target: PretrainedConfig) -> dict[str, Any]:
    rp = getattr(target, "rope_parameters", None)
    if rp:
        return dict(rp)
    rp = {"rope_type": "default", "rope_theta": float(getattr(target, "rope_theta", 10000.0))}
    scaling = getattr(target, "rope_scaling", None)
    if scaling:
        rp.update(scaling)
    return rp


# RoPE variants the drafter reproduces exactly: its rotary embedding is transformers' own for these types
# (theta, linear/dynamic/YaRN/LongRoPE/Llama-3 scaling), written to config.json for vLLM and SGLang, which
# implement the same types for a Qwen3 layer.
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")


def check_rope(target: PretrainedConfig) -> dict[str, Any]:
    """The target's RoPE parameters, or a clear refusal when the drafter could not rotate like it.

    A partial rotary factor (GLM-4: 0.5, rotating half of each head) is refused: the drafter is a Qwen3
    layer, which serving engines rotate over the whole head, so a drafter trained with the target's
    partial rotation would be rotated differently by vLLM and accept almost nothing, silently."""
    rp = _rope_parameters(target)
    partial = rp.get("partial_rotary_factor", getattr(target, "partial_rotary_factor", None))
    if partial is not None and float(partial) != 1.0:
        raise ValueError(
            f"the target rotates only part of each head (partial_rotary_factor {partial}); a DFlash drafter "
            "is a Qwen3 layer that vLLM/SGLang rotate over the whole head, so it cannot match this target"
        )
    kind = str(rp.get("rope_type", rp.get("type", "default")))
    if kind not in ROPE_TYPES or "mrope_section" in rp:
        raise ValueError(
            f"the target's RoPE type {kind!r} is not one the drafter reproduces (one of {', '.join(ROPE_TYPES)})"
        )
    return rp


def make_draft_config(
    target: PretrainedConfig,
    *,
    num_hidden_layers: int,
    block_size: int,
    mask_token_id: int,
    target_layer_ids: list[int] | None = None,
    intermediate_size: int | None = None,
    num_taps: int | None = None,
) -> Qwen3Config:
    """A drafter config for ``target``: ``num_hidden_layers`` Qwen3 layers at the target's width, tapping
    ``target_layer_ids``, else ``num_taps`` layers spread over the target (as many as it has, for a
    shallow one), else one per drafter layer."""
    n_target = int(target.num_hidden_layers)
    taps = min(num_taps, n_target - 1) if num_taps else num_hidden_layers
    ids = list(target_layer_ids) if target_layer_ids else default_target_layer_ids(n_target, taps)
    if max(ids) > n_target - 2 or min(ids) < 0:
        raise ValueError(
            f"target_layer_ids {ids} out of range 0..{n_target - 2} for a {n_target}-layer target"
        )
    heads = int(target.num_attention_heads)
    head_dim = int(getattr(target, "head_dim", None) or target.hidden_size // heads)
    cfg = Qwen3Config(
        vocab_size=int(target.vocab_size),
        hidden_size=int(target.hidden_size),
        intermediate_size=int(intermediate_size or target.intermediate_size),
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=heads,
        num_key_value_heads=int(getattr(target, "num_key_value_heads", None) or heads),
        head_dim=head_dim,
        hidden_act=getattr(target, "hidden_act", "silu"),
        max_position_embeddings=int(target.max_position_embeddings),
        rms_norm_eps=float(getattr(target, "rms_norm_eps", 1e-6)),
        rope_parameters=check_rope(target),
        attention_bias=False,
        attention_dropout=0.0,
        use_sliding_window=False,
        sliding_window=None,
        layer_types=["full_attention"] * num_hidden_layers,
        max_window_layers=num_hidden_layers,
        tie_word_embeddings=bool(getattr(target, "tie_word_embeddings", False)),
        bos_token_id=getattr(target, "bos_token_id", None),
        eos_token_id=getattr(target, "eos_token_id", None),
        pad_token_id=getattr(target, "pad_token_id", None),
        architectures=[ARCHITECTURE],
    )
    cfg.block_size = block_size
    cfg.num_target_layers = n_target
    cfg.dflash_config = {"mask_token_id": int(mask_token_id), "target_layer_ids": [int(i) for i in ids]}
    return cfg


def config_dict(cfg: Qwen3Config) -> dict[str, Any]:
    """The JSON written as ``config.json``: Qwen3 fields + DFlash fields, nothing private."""
    d = cfg.to_dict()
    named = list(d.get("architectures") or [])
    d["architectures"] = named if named and named[0] in ARCHITECTURES else [ARCHITECTURE]
    d["model_type"] = "qwen3"
    d.setdefault("head_dim", cfg.hidden_size // cfg.num_attention_heads)
    # Loaders built on transformers 4.x read the flat RoPE fields; 5.x reads rope_parameters. Write both.
    rp = d.get("rope_parameters") or {}
    if "rope_theta" in rp:
        d["rope_theta"] = rp["rope_theta"]
        extra = {k: v for k, v in rp.items() if k != "rope_theta"}
        d["rope_scaling"] = extra if extra.get("rope_type", "default") != "default" else None
    for private in ("_name_or_path", "output_hidden_states", "return_dict", "id2label", "label2id"):
        d.pop(private, None)
    return d


def config_from_dict(d: dict[str, Any]) -> Qwen3Config:
    d = dict(d)
    d.pop("model_type", None)
    cfg = Qwen3Config(**d)
    if not hasattr(cfg, "dflash_config") or "target_layer_ids" not in cfg.dflash_config:
        raise ValueError("not a DFlash drafter config: dflash_config.target_layer_ids is missing")
    return cfg


def mask_token_id(cfg: PretrainedConfig) -> int:
    return int(cfg.dflash_config["mask_token_id"])


def target_layer_ids(cfg: PretrainedConfig) -> list[int]:
    return [int(i) for i in cfg.dflash_config["target_layer_ids"]]


def resolve_mask_token(tokenizer: Any, embedding_rows: int) -> tuple[int, str]:
    """Choose the mask token id, and say how: the drafter feeds the TARGET's embedding of this id.

    1. the tokenizer's own mask token, when it has one;
    2. else the first embedding row past the tokenizer (padded vocabularies: Qwen3's 151,669 tokens in a
       151,936-row table give 151669, the id released Qwen3 drafters use) — a row no text ever produces;
    3. else (a tokenizer that fills its table) a special token that no chat template, BOS, EOS, PAD or
       UNK uses, the highest such id, registered as the tokenizer's mask token so every later use agrees.
    """
    mid = getattr(tokenizer, "mask_token_id", None)
    if mid is not None and 0 <= int(mid) < embedding_rows:
        return int(mid), f"tokenizer mask token {tokenizer.mask_token!r}"
    n = len(tokenizer)
    if embedding_rows > n:
        return n, "first embedding row past the tokenizer's vocabulary"
    template = str(getattr(tokenizer, "chat_template", "") or "")
    used = {
        getattr(tokenizer, a, None) for a in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")
    }
    best: tuple[int, str] | None = None
    for tid, tok in getattr(tokenizer, "added_tokens_decoder", {}).items():
        content = getattr(tok, "content", str(tok))
        if tid in used or tid >= embedding_rows or content in template:
            continue
        if best is None or tid > best[0]:
            best = (int(tid), content)
    if best is None:
        raise ValueError("no free embedding row and no unused special token to serve as the mask token")
    with contextlib.suppress(Exception):  # a tokenizer that refuses is still usable by id
        tokenizer.add_special_tokens({"mask_token": best[1]})
    return best[0], f"unused special token {best[1]!r} registered as the mask token"
