"""The drafter kinds one trainer builds, trains, evaluates and exports: the registry every stage looks a
kind up in (never branching on its name). Each is a model class, the architecture its ``config.json``
names (what vLLM 0.32 loads it as), its speculative method, how a run's knobs make its config, and what
its model card says. Adding a kind: its module, and one entry in ``KINDS``.

- ``dflash``: the block drafter (``DFlashDraftModel``; vLLM ``method: dflash``).
- ``dflash2``: the block drafter + in-block convolutions and a candidate selector (``DFlash2DraftModel``;
  vLLM ``method: dflash``, which picks the candidate walk by the architecture), trainer/dflash/dflash2.py.
- ``dspark``: the block drafter + a Markov head and a confidence head (``Qwen3DSparkModel``; vLLM
  ``method: dspark``), trainer/dflash/dspark.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from transformers import Qwen3Config

from trainer.dflash import dflash2, dspark
from trainer.dflash.model import CONFIG_NAME, DFlashDraftModel


def _as_is(cfg: Qwen3Config, knobs: Any) -> Qwen3Config:
    return cfg


def _no_card(config: dict[str, Any], drafts: int) -> list[str]:
    return []


class DrafterKind(NamedTuple):
    model: type[DFlashDraftModel]
    architecture: str
    method: str  # vLLM's speculative_config method
    title: str  # how the model card names it
    describe: str  # one line for the `drafter` option's help
    configure: Callable[[Qwen3Config, Any], Qwen3Config] = _as_is  # a DFlash config + the run's knobs
    card: Callable[[dict[str, Any], int], list[str]] = _no_card  # (config.json, drafted tokens) -> lines
    # FSDP: its heads run outside the drafter's forward (they read the labels' previous tokens), where
    # FSDP has already resharded the root's parameters; DDP keeps every parameter whole
    fsdp: bool = True


KINDS: dict[str, DrafterKind] = {
    "dflash": DrafterKind(DFlashDraftModel, "DFlashDraftModel", "dflash", "DFlash", "the block drafter"),
    "dflash2": DrafterKind(
        dflash2.DFlash2DraftModel,
        dflash2.ARCHITECTURE,
        "dflash",
        "DFlash2",
        "+ in-block convolutions and a candidate selector",
        dflash2.configure,
        dflash2.card,
        fsdp=False,
    ),
    "dspark": DrafterKind(
        dspark.DSparkDraftModel,
        dspark.ARCHITECTURE,
        "dspark",
        "DSpark",
        "+ Markov and confidence heads",
        dspark.configure,
        dspark.card,
        fsdp=False,
    ),
}


def kind_of(draft_dir: str | Path) -> str:
    """The kind an exported or trained drafter folder holds (by its config's architecture)."""
    arch = (json.loads((Path(draft_dir) / CONFIG_NAME).read_text()).get("architectures") or [""])[0]
    for name, kind in KINDS.items():
        if kind.architecture == arch:
            return name
    raise ValueError(f"{draft_dir}: architecture {arch!r} is not a drafter kind this trainer knows")


def load_drafter(draft_dir: str | Path, device: str | torch.device = "cpu") -> DFlashDraftModel:
    return KINDS[kind_of(draft_dir)].model.load(draft_dir, device=device)


def drafted_tokens(draft_dir: str | Path) -> int:
    """vLLM's num_speculative_tokens for this drafter (DFlash, DFlash2: block - 1; DSpark: its block)."""
    cfg = json.loads((Path(draft_dir) / CONFIG_NAME).read_text())
    return int(cfg["block_size"]) - (1 - KINDS[kind_of(draft_dir)].model.query_shift)
