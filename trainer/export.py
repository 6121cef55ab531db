"""``python -m trainer export RUN_DIR OUT_DIR``: the drafter as a Hugging Face directory, released DFlash format.

``OUT_DIR`` gets ``config.json`` (``"architectures": ["DFlashDraftModel"]``, ``"model_type": "qwen3"``,
``block_size``, ``num_target_layers``, ``num_hidden_layers``, ``dflash_config.{mask_token_id,
target_layer_ids}`` and the usual Qwen3 fields) and ``model.safetensors`` (the drafter's own tensors only:
no embeddings, no LM head — the target's are used), plus a README with the serving command and
``dflash_factory.json`` (how it was trained, its measured tau). vLLM loads it with
``--speculative-config '{"method": "dflash", "model": "OUT_DIR", "num_speculative_tokens": B-1}'``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Literal

import torch
import typer
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from trainer.dflash.config import REQUIRED_KEYS
from trainer.dflash.kinds import KINDS, drafted_tokens, kind_of, load_drafter
from trainer.dflash.model import CONFIG_NAME

DTYPES = ("bfloat16", "float16", "float32")


def export(run_dir: str | Path, out_dir: str | Path, dtype: str = "bfloat16") -> Path:
    run = Path(run_dir).resolve()
    src = run / "drafter" if (run / "drafter" / CONFIG_NAME).exists() else run
    if not (src / CONFIG_NAME).exists():
        raise SystemExit(f"no trained drafter in {run} (expected {run / 'drafter' / CONFIG_NAME})")
    drafter = load_drafter(src)
    out = Path(out_dir)
    drafter.save(out, dtype=getattr(torch, dtype))
    config = json.loads((out / CONFIG_NAME).read_text())
    missing = [k for k in REQUIRED_KEYS if k not in config]
    if missing:
        raise RuntimeError(f"exported config lacks {missing}")
    meta: dict[str, Any] = {}
    for name in ("dflash_factory.json",):
        if (src / name).exists():
            meta = json.loads((src / name).read_text())
    if (run / "eval.json").exists():
        ev = json.loads((run / "eval.json").read_text())
        meta["eval"] = {
            k: ev[k] for k in ("tau", "lossless", "per_position_acceptance", "n_prompts") if k in ev
        }
    (out / "dflash_factory.json").write_text(json.dumps(meta, indent=2) + "\n")
    (out / "README.md").write_text(_card(config, meta, kind_of(out), drafted_tokens(out)))
    if (run / "acceptance.png").exists():
        shutil.copy(run / "acceptance.png", out / "acceptance.png")
    return out


def _card(config: dict[str, Any], meta: dict[str, Any], kind: str, drafts: int) -> str:
    b = drafts + 1
    spec = json.dumps({"method": KINDS[kind].method, "model": ".", "num_speculative_tokens": drafts})
    ev = meta.get("eval", {})
    lines = [
        f"# {KINDS[kind].title} drafter",
        "",
        f"A block-diffusion drafter ({kind}) for `{meta.get('target', 'the target model')}`: "
        f"{config['num_hidden_layers']} Qwen3 layers, block size {b}, taps "
        f"{config['dflash_config']['target_layer_ids']} of {config['num_target_layers']} target layers, "
        f"mask token {config['dflash_config']['mask_token_id']}. It has no embedding or LM head of its own: "
        "it uses the target's.",
        "",
        "Trained by dflash-factory on the target's own outputs on coding-agent traffic.",
        "",
    ]
    lines += KINDS[kind].card(config, drafts)
    if ev:
        lines += [
            f"Measured by greedy speculative decoding on {ev.get('n_prompts')} held-out prompts: "
            f"tau {ev.get('tau')}, lossless {ev.get('lossless')}.",
            "",
        ]
    lines += [
        "Serve with vLLM (run from this directory, or put its path in `model`):",
        "",
        "```",
        f"vllm serve <target> --speculative-config '{spec}'",
        "```",
        "",
    ]
    return "\n".join(lines)


class ExportSettings(BaseModel):
    """`python -m trainer export`: the exported weights' dtype."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="Weight dtype (released drafters: bfloat16)."
    )


@settings_command(ExportSettings)
def export_command(
    settings: ExportSettings,
    run_dir: Path = typer.Argument(..., help="A run directory (runs/<name> or runs/latest)."),
    out_dir: Path = typer.Argument(..., help="Where to write the Hugging Face directory."),
) -> None:
    """Export a trained drafter as a Hugging Face directory in the released DFlash format."""
    out = export(run_dir, out_dir, settings.dtype)
    cfg = json.loads((out / "config.json").read_text())
    typer.echo(
        f"exported {out}: config.json + model.safetensors ({cfg['num_hidden_layers']} layers, block "
        f"{cfg['block_size']}, taps {cfg['dflash_config']['target_layer_ids']}, mask {cfg['dflash_config']['mask_token_id']})"
    )
