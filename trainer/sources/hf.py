"""`hf`: the target in-process (what training always did): one no-grad `Target.tap` per sequence."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lm.model import Target
from trainer.sources.base import shared


class HFSource:
    name = "hf"

    def __init__(self, target: Target) -> None:
        self.target = target

    def _one(self, ids: Sequence[int], layer_ids: Sequence[int]) -> torch.Tensor:
        x = torch.tensor([list(ids)], dtype=torch.long, device=self.target.model.device)
        with torch.no_grad():
            return self.target.tap(x, layer_ids)[0].cpu()

    def taps_many(self, sequences: Sequence[Sequence[int]], layer_ids: Sequence[int]) -> list[torch.Tensor]:
        return shared(self._one, sequences, layer_ids)

    def taps(self, input_ids: torch.Tensor, layer_ids: Sequence[int]) -> torch.Tensor:
        with torch.no_grad():  # on the training device, as the loop always did
            return self.target.tap(input_ids, layer_ids)
