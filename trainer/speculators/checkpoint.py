"""speculators DFlash checkpoints ⇄ the released DFlash layout (what `export`, `eval` and vLLM read).

A speculators DFlash checkpoint (`DFlashDraftModel.save_pretrained`, speculators 0.9) is a directory:

    config.json   {"architectures": ["DFlashDraftModel"], "speculators_model_type": "dflash",
                   "speculators_version": ..., "transformer_layer_config": {Qwen3 fields of the draft,
                   num_hidden_layers = draft depth, layer_types, sliding_window, rope_parameters},
                   "draft_vocab_size": V', "block_size": B, "aux_hidden_state_layer_ids": [...],
                   "mask_token_id": m, "sample_from_anchor": false, "sliding_window_non_causal": false,
                   "target_hidden_size": null, "speculators_config": {"algorithm": "dflash",
                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": B-1}],
                   "default_proposal_method": "greedy", "verifier": {"name_or_path", "architectures"}}}
    model.safetensors   the body (fc, hidden_norm, layers.*, norm) + embed_tokens, lm_head, and t2d/d2t
                        when the draft vocabulary is pruned

`aux_hidden_state_layer_ids` are vLLM's numbering (input of layer k+1 = this project's tap k), without
the final layer speculators appends at extraction. The released layout is flat (`dflash_config`,
`block_size`, `num_target_layers` next to the Qwen3 fields) and holds the body only. Refused on import:
a pruned draft vocabulary (vLLM's DFlash and this project's eval use the target's full LM head), sliding-
window or DSpark (`sample_from_anchor`) drafts, whose attention this project's drafter does not compute.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from trainer.dflash.config import config_dict, config_from_dict
from trainer.sources.numbering import from_vllm, to_vllm

BODY_PREFIXES = ("fc.", "hidden_norm.", "layers.", "norm.")
FLAT_ONLY = (
    "architectures",
    "block_size",
    "dflash_config",
    "num_target_layers",
    "dtype",
    "rope_theta",
    "rope_scaling",
)
SPECULATORS_VERSION = "0.9.0"  # the layout written; only the fields below are read back


def _body(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if k.startswith(BODY_PREFIXES)}


def _weights(src: Path) -> dict[str, torch.Tensor]:
    """`model.safetensors`, or the shards its `model.safetensors.index.json` names."""
    index = src / "model.safetensors.index.json"
    if index.exists():
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
            state.update(load_file(str(src / shard)))
        return state
    if not (src / "model.safetensors").exists():
        raise ValueError(f"{src} holds no model.safetensors (nor an index of shards)")
    return load_file(str(src / "model.safetensors"))


def to_speculators(
    drafter_dir: str | Path,
    out_dir: str | Path,
    verifier: str,
    verifier_architectures: list[str] | None = None,
    shared: dict[str, torch.Tensor] | None = None,
) -> Path:
    """A released-layout drafter → a speculators checkpoint (`--from-pretrained` can start from it).
    `shared`: the target's `embed_tokens.weight` and `lm_head.weight`, which speculators stores too."""
    src, out = Path(drafter_dir), Path(out_dir)
    flat = json.loads((src / "config.json").read_text())
    n_target = int(flat["num_target_layers"])
    layer_cfg = {k: v for k, v in flat.items() if k not in FLAT_ONLY}
    layer_cfg["model_type"] = "qwen3"
    block = int(flat["block_size"])
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "speculators_model_type": "dflash",
        "speculators_version": SPECULATORS_VERSION,
        "transformer_layer_config": layer_cfg,
        "draft_vocab_size": int(flat["vocab_size"]),
        "block_size": block,
        "target_hidden_size": None,
        "aux_hidden_state_layer_ids": to_vllm(
            flat["dflash_config"]["target_layer_ids"], n_target, include_last_layer=False
        ),
        "mask_token_id": int(flat["dflash_config"]["mask_token_id"]),
        "sliding_window_non_causal": False,
        "sample_from_anchor": False,
        "speculators_config": {
            "algorithm": "dflash",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": block - 1}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": verifier_architectures or []},
        },
        "dtype": flat.get("dtype"),
        # not a speculators field: what import needs to rebuild the flat config without the target
        "dflash_factory": {"num_target_layers": n_target},
    }
    out.mkdir(parents=True, exist_ok=True)
    state = {**_body(load_file(str(src / "model.safetensors"))), **(shared or {})}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out


def _refuse(cfg: dict[str, Any], layer: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    if cfg.get("speculators_model_type") != "dflash":
        raise ValueError(
            f"not a speculators DFlash checkpoint (speculators_model_type {cfg.get('speculators_model_type')!r})"
        )
    vocab = int(layer["vocab_size"])
    if int(cfg.get("draft_vocab_size") or vocab) != vocab or "d2t" in state or "t2d" in state:
        raise ValueError(
            f"the draft vocabulary is pruned ({cfg.get('draft_vocab_size')} of {vocab} tokens): the released DFlash "
            "format drafts over the target's full vocabulary; retrain without --draft-vocab-size"
        )
    if cfg.get("sample_from_anchor"):
        raise ValueError(
            "sample_from_anchor is set (DSpark-style): not a DFlash drafter vLLM's dflash method serves"
        )
    types = layer.get("layer_types") or []
    if any(t != "full_attention" for t in types) or layer.get("use_sliding_window"):
        raise ValueError(
            f"draft layers {types} use sliding-window attention; this project's drafter (and the recipe) attends "
            "fully on every layer: retrain with --full-attention-indices covering every layer"
        )


def from_speculators(ckpt_dir: str | Path, out_dir: str | Path, num_target_layers: int | None = None) -> Path:
    """A speculators DFlash checkpoint → the released layout in `out_dir` (config.json + model.safetensors)."""
    src, out = Path(ckpt_dir), Path(out_dir)
    cfg = json.loads((src / "config.json").read_text())
    layer = dict(cfg.get("transformer_layer_config") or {})
    state = _weights(src)
    _refuse(cfg, layer, state)
    n_target = num_target_layers or (cfg.get("dflash_factory") or {}).get("num_target_layers")
    if n_target is None:
        raise ValueError(
            "num_target_layers: speculators does not store the target's depth; pass --num-target-layers"
        )
    aux = list(cfg["aux_hidden_state_layer_ids"])
    flat = {k: v for k, v in layer.items() if k not in ("_attn_implementation", "architectures")}
    flat.update(
        architectures=["DFlashDraftModel"],
        model_type="qwen3",
        block_size=int(cfg["block_size"]),
        num_target_layers=int(n_target),
        dflash_config={
            "mask_token_id": int(cfg["mask_token_id"]),
            "target_layer_ids": from_vllm(aux, int(n_target), include_last_layer=False),  # tap ids −1
        },
    )
    # speculators saves the layer config as a diff against Qwen3's defaults: fill them in, and write it
    # exactly as `DFlashDraftModel.save` does (flat RoPE fields included)
    flat = config_dict(config_from_dict(flat))
    body = _body(state)
    missing = [p for p in ("fc.weight", "hidden_norm.weight", "norm.weight") if p not in body]
    if missing:
        raise ValueError(f"{src / 'model.safetensors'} lacks {missing}")
    out.mkdir(parents=True, exist_ok=True)
    save_file(body, str(out / "model.safetensors"), metadata={"format": "pt"})
    flat["dtype"] = str(next(iter(body.values())).dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(flat, indent=2, sort_keys=True) + "\n")
    return out
