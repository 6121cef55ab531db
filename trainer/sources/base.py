"""The feature-source seam: where training gets the target's tapped hidden states from.

A source maps a sequence of token ids to its taps, `[T, len(layer_ids)·H]` — this project's tap ids
(`lm.taps`: id k is the output of decoder layer k), concatenated in the order asked. Three exist:
`hf` (the target in-process, the default), `cache` (files written ahead of training) and `vllm` (a running
vLLM with hidden-state extraction). Features of a causal target over a prefix do not depend on what
follows it, so a sequence that is a prefix of another is served from the longer one's features
(`prefix_groups`): each shared prefix is computed — or sent — once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import torch

from trainer.errors import TrainerError


class FeatureError(TrainerError, RuntimeError):
    """A source could not produce a complete, checked feature set; nothing partial is returned."""


@runtime_checkable
class FeatureSource(Protocol):
    name: str

    def taps_many(self, sequences: Sequence[Sequence[int]], layer_ids: Sequence[int]) -> list[torch.Tensor]:
        """One `[T_i, len(layer_ids)·H]` tensor per sequence (CPU), all or an exception."""
        ...

    def taps(self, input_ids: torch.Tensor, layer_ids: Sequence[int]) -> torch.Tensor:
        """What a training step asks for: `[1, T]` ids on a device → `[1, T, n·H]` taps on that device."""
        ...


class TapsOne(Protocol):
    def __call__(self, ids: Sequence[int], layer_ids: Sequence[int]) -> torch.Tensor: ...


def prefix_groups(sequences: Sequence[Sequence[int]]) -> list[int]:
    """For each sequence, the index of the longest sequence it is a prefix of (itself when none).

    Sorted lexicographically, a sequence that is a prefix of any other is a prefix of the one right
    after it, so one backward pass over the sorted order finds every covering sequence.
    """
    order = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
    owner = list(range(len(sequences)))
    for a, b in zip(reversed(order[:-1]), reversed(order[1:]), strict=True):
        sa, sb = sequences[a], sequences[b]
        if len(sa) <= len(sb) and list(sb[: len(sa)]) == list(sa):
            owner[a] = owner[b]
    return owner


def shared(
    source_one: TapsOne, sequences: Sequence[Sequence[int]], layer_ids: Sequence[int]
) -> list[torch.Tensor]:
    """`taps_many` from a one-sequence function: each covering sequence computed once, prefixes sliced."""
    owner = prefix_groups(sequences)
    computed: dict[int, torch.Tensor] = {}
    for i in sorted(set(owner)):
        computed[i] = source_one(sequences[i], layer_ids)
    return [computed[owner[i]][: len(seq)] for i, seq in enumerate(sequences)]


def taps_via_many(source: FeatureSource, input_ids: torch.Tensor, layer_ids: Sequence[int]) -> torch.Tensor:
    """`taps` for a source whose features live off the device (files, a server)."""
    feats = source.taps_many([input_ids[0].tolist()], layer_ids)[0]
    return feats.to(input_ids.device)[None]


def step_taps(
    source: FeatureSource,
    sequences: Sequence[Sequence[int]],
    layer_ids: Sequence[int],
    starts: Sequence[int] | None = None,
) -> Callable[[Sequence[int], int], torch.Tensor]:
    """A packed step's `taps_fn`: every sequence of the step asked of `source` in one batch (so a
    sequence that is a prefix of another is sent once, and a server sees them concurrently), then served
    by ids and first position — the host ids, `start` → `[1, T − start, n·H]` where the source keeps it.
    `starts`: the first position each sequence needs (a segment sharing a prefix needs only the rest); a
    source that stores only those rows (`cache`: `taps_tails`) then reads nothing more."""
    starts = list(starts) if starts is not None else [0] * len(sequences)
    tails = getattr(source, "taps_tails", None)
    if tails is not None:
        got = tails(sequences, starts, layer_ids)
    else:
        got = [f[a:] for f, a in zip(source.taps_many(sequences, layer_ids), starts, strict=True)]
    feats = {(tuple(s), a): f for s, a, f in zip(sequences, starts, got, strict=True)}

    def taps(input_ids: Sequence[int], start: int) -> torch.Tensor:
        return feats[(tuple(input_ids), start)][None]

    return taps
