"""The drafter kinds one trainer builds, trains, evaluates and exports: each a model class, the
architecture its ``config.json`` names (what vLLM 0.32 loads it as), and its speculative method.

- ``dflash``: the block drafter (``DFlashDraftModel``; vLLM ``method: dflash``).
- ``dflash2``: the block drafter + in-block convolutions and a candidate selector (``DFlash2DraftModel``;
  vLLM ``method: dflash``, which picks the candidate walk by the architecture), trainer/dflash/dflash2.py.
- ``dspark``: the block drafter + a Markov head and a confidence head (``Qwen3DSparkModel``; vLLM
  ``method: dspark``), trainer/dflash/dspark.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, NamedTuple

import torch

from trainer.dflash.dflash2 import ARCHITECTURE as DFLASH2_ARCH
from trainer.dflash.dflash2 import DFlash2DraftModel
from trainer.dflash.dspark import ARCHITECTURE as DSPARK_ARCH
from trainer.dflash.dspark import DSparkDraftModel
from trainer.dflash.model import CONFIG_NAME, DFlashDraftModel

Kind = Literal["dflash", "dflash2", "dspark"]


class DrafterKind(NamedTuple):
    model: type[DFlashDraftModel]
    architecture: str
    method: str  # vLLM's speculative_config method
    title: str  # how the model card names it


KINDS: dict[str, DrafterKind] = {
    "dflash": DrafterKind(DFlashDraftModel, "DFlashDraftModel", "dflash", "DFlash"),
    "dflash2": DrafterKind(DFlash2DraftModel, DFLASH2_ARCH, "dflash", "DFlash2"),
    "dspark": DrafterKind(DSparkDraftModel, DSPARK_ARCH, "dspark", "DSpark"),
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
