"""The prefill of a prompt, with an optional prefix cache (what vLLM's automatic prefix caching does).

A 13k-token agent prompt costs about a minute's forward on 2 cores, and an evaluation decodes each prompt
several times: plainly and speculatively (the lossless check), again from each divergence, and the parity
gate once more for its greedy continuation, its features and its throwaway drafter. A `PrefixCache` keeps
the KV cache, the last position's logits and the tapped features of what was prefilled, so each of those
forwards only the tokens past the longest prefix already computed; the stand-in server keeps one for all
its requests (`serve-target --prefix-cache-tokens`), so an agent's next call costs its new tokens. Either
way a prompt is prefilled in chunks, yielding between them so a scheduler can interleave other requests.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from transformers import DynamicCache

if TYPE_CHECKING:
    from lm.model import Target


class Prefill(NamedTuple):
    cache: DynamicCache  # the prompt's KV cache, the caller's to extend
    logits: torch.Tensor  # [V]: the next-token logits after the prompt's last token
    taps: torch.Tensor | None  # [1, T, len(layer_ids)·H] when layer ids were asked for


@dataclass
class _Entry:
    ids: tuple[int, ...]
    cache: DynamicCache
    logits: torch.Tensor
    taps: dict[int, torch.Tensor]  # layer → [1, T, H]


class PrefixCache:
    """Prefilled prompts of one target, reused by their longest common prefix. Every prefill taps
    `layers` (what its users will ask for, declared up front with `want`: an entry serves only requests
    for layers it tapped), and it keeps at most `max_tokens` positions in all, the least recently used
    dropped first; a prompt whose continuation is cached is dropped at once (one token re-run serves it)."""

    def __init__(self, layers: Sequence[int] = (), max_tokens: int = 32768) -> None:
        self.layers: list[int] = []
        self.want(layers)
        self.max_tokens = max_tokens
        self._entries: list[_Entry] = []  # most recently used last
        self.forwarded = 0  # prompt tokens actually forwarded: what the cache did not save

    def want(self, layers: Sequence[int]) -> None:
        """Tap these layers too from now on."""
        self.layers = sorted({*self.layers, *(int(k) for k in layers)})

    def _best(self, ids: Sequence[int], layers: set[int]) -> tuple[_Entry | None, int]:
        best, length = None, 0
        for entry in self._entries:
            n = _common(entry.ids, ids) if layers <= entry.taps.keys() else 0
            if n > length:
                best, length = entry, n
        return best, length

    def _keep(self, entry: _Entry) -> None:
        def covered(e: _Entry) -> bool:
            return entry.ids[: len(e.ids)] == e.ids and e.taps.keys() <= entry.taps.keys()

        self._entries = [e for e in self._entries if not covered(e)] + [entry]
        while sum(len(e.ids) for e in self._entries) > self.max_tokens and len(self._entries) > 1:
            self._entries.pop(0)


def prefill(
    target: Target,
    prompt_ids: Sequence[int],
    layer_ids: Sequence[int] = (),
    chunk: int = 512,
    prefix: PrefixCache | None = None,
) -> Generator[list[int], None, Prefill]:
    """Prefill `prompt_ids` (`yield from` it: it yields [] between chunks, as a decoding strategy does,
    and returns the `Prefill`). With `prefix`, only the tokens past the longest cached prefix run."""
    if not prompt_ids:
        raise ValueError("empty prompt")
    ids = tuple(int(t) for t in prompt_ids)
    if prefix is not None:
        prefix.want(layer_ids)
    tapped = prefix.layers if prefix is not None else list(dict.fromkeys(layer_ids))
    entry, start = prefix._best(ids, set(layer_ids)) if prefix is not None else (None, 0)
    if entry is not None:  # it tapped what this request asks for, perhaps not every layer wanted since
        tapped = [k for k in tapped if k in entry.taps]
    if entry is not None and start == len(ids) == len(entry.ids):
        cache, logits, taps = copy.deepcopy(entry.cache), entry.logits, entry.taps
        assert prefix is not None
        prefix._keep(entry)  # used again: the last to be dropped
    else:
        start = min(start, len(ids) - 1)  # the last token runs again: its logits are not kept
        cache = copy.deepcopy(entry.cache) if entry is not None else target.new_cache()
        if entry is not None:
            target.crop_cache(cache, start)
        parts: dict[int, list[torch.Tensor]] = {
            k: [entry.taps[k][:, :start]] if entry else [] for k in tapped
        }
        dev = target.device
        for s in range(start, len(ids), chunk):
            x = torch.tensor([ids[s : s + chunk]], dtype=torch.long, device=dev)
            out = target.forward(x, cache, layer_ids=tapped, logits_to_keep=1)
            for i, k in enumerate(tapped):
                assert out.taps is not None
                parts[k].append(out.taps[..., i * target.hidden_size : (i + 1) * target.hidden_size])
            if s + chunk < len(ids):
                yield []
        logits = out.logits[0, -1]
        taps = {k: torch.cat(v, dim=1) for k, v in parts.items()}
        if prefix is not None:
            prefix.forwarded += len(ids) - start
            prefix._keep(_Entry(ids, copy.deepcopy(cache), logits, taps))
    joined = torch.cat([taps[k] for k in layer_ids], dim=-1) if layer_ids else None
    return Prefill(cache, logits, joined)


def prefilled(
    target: Target,
    prompt_ids: Sequence[int],
    layer_ids: Sequence[int] = (),
    prefix: PrefixCache | None = None,
) -> Prefill:
    """`prefill` run to its end, for a caller that interleaves nothing."""
    steps = prefill(target, prompt_ids, layer_ids, prefix=prefix)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
