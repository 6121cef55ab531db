"""A throwaway drafter that proves the export path when the run's own drafter cannot.

The parity gate compares our engine's acceptance with the serving engine's; a drafter that accepts almost
nothing makes that comparison inconclusive (a broken export accepts nothing too). So the gate can take the
run's drafter — its kind, shape, taps and weights — and overfit it on the target's own greedy
continuations of the gate's prompts until it accepts most of them, export it the way `trainer export`
does, and gate *that*: a tap off by one, another RoPE layout or an unloaded tensor then shows as a gap,
not as noise around 1. The throwaway is written under the gate's log folder, never over the run's drafter.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from lm import Target
from lm.engine import Autoregressive, Engine, SamplingParams
from lm.prefix import PrefixCache, prefilled
from trainer.dflash import helpers as H
from trainer.dflash.kinds import load_drafter
from trainer.dflash.model import DFlashDraftModel
from trainer.dflash.objective import dflash_loss
from trainer.drafting import frozen_weight
from trainer.evaluate import Prompt
from trainer.export import export

ANCHORS = 64  # per sequence: every position of a short continuation is an anchor


class _Memo(NamedTuple):  # what the gate's checks and its throwaway would otherwise compute again
    greedy: dict[tuple[tuple[int, ...], int], list[int]]
    prefix: PrefixCache  # every prompt prefilled once for (a)'s continuation, (b), (c), (d) and (b')


_MEMO: dict[int, _Memo] = {}  # id(target) → its memo, dropped with the target


def _memo(target: Target) -> _Memo:
    if id(target) not in _MEMO:
        weakref.finalize(target, _MEMO.pop, id(target), None)
        _MEMO[id(target)] = _Memo({}, PrefixCache(max_tokens=49152))
    return _MEMO[id(target)]


def prefix_cache(target: Target, layers: Sequence[int] = ()) -> PrefixCache:
    """The gate's prefix cache for `target`, tapping `layers` from now on (declare them before the first
    prefill: an entry serves only the layers it tapped)."""
    cache = _memo(target).prefix
    cache.want(layers)
    return cache


def greedy(target: Target, prompt: list[int], n: int) -> list[int]:
    """The target's greedy continuation of `prompt` (n tokens), decoded once per target and prompt."""
    seen = _memo(target).greedy
    if (key := (tuple(prompt), n)) not in seen:
        params = SamplingParams(max_tokens=n, temperature=0.0)
        engine = Engine(target, Autoregressive(prefix=prefix_cache(target)))
        seen[key] = [t for s in engine.steps(prompt, params) for t in s.token_ids]
    return list(seen[key])


def layer_features(target: Target, ids: list[int], layers: Sequence[int]) -> dict[int, torch.Tensor]:
    """layer → the target's features of `ids` there ([T, H] float32, CPU), from the gate's prefix cache: a
    13k-token agent prompt is a minute's forward on 2 cores, prefilled once for every check."""
    taps = prefilled(target, ids, layers, prefix_cache(target, layers)).taps
    assert taps is not None
    return dict(zip(layers, taps[0].float().cpu().split(target.hidden_size, dim=-1), strict=True))


def throwaway(
    run: Path,
    target: Target,
    prompts: list[Prompt],
    max_tokens: int,
    out: Path,
    steps: int = 60,
    lr: float = 3e-3,
) -> Path:
    """`out`, a run folder the gate reads: `drafter/` (the run's drafter overfit on `prompts`' greedy
    continuations for `steps` passes) and `export/` (it in the released layout)."""
    torch.manual_seed(0)
    drafter = load_drafter(run / "drafter").float()
    pairs = [(p.ids, greedy(target, p.ids, max_tokens)) for p in prompts]
    overfit_on(drafter, target, pairs, steps, lr).save(out / "drafter")
    export(out, out / "export")
    return out


def overfit_on(
    drafter: DFlashDraftModel, target: Target, pairs: list[tuple[list[int], list[int]]], steps: int, lr: float
) -> DFlashDraftModel:
    """`drafter` trained on exactly these (prompt, completion) pairs, `steps` passes, until it predicts them:
    high, checkable acceptance on any engine that computes what the trainer does."""
    drafter.train()
    embed = frozen_weight(target.embed_tokens).detach().float()
    head = frozen_weight(target.lm_head).detach().float()
    b = drafter.block_size
    weights = H.loss_weights(b, H.default_gamma(b))
    seqs = []
    for prompt, completion in pairs:  # the target's features once per pair: it is frozen
        ids = torch.tensor(prompt + completion)
        mask = torch.tensor([0] * len(prompt) + [1] * len(completion))
        feats = layer_features(target, prompt + completion, drafter.target_layer_ids)
        seqs.append((ids, mask, torch.cat(list(feats.values()), dim=-1)[None]))
    opt = torch.optim.AdamW(drafter.parameters(), lr=lr)
    for _ in range(steps):
        for ids, mask, taps in seqs:
            loss = dflash_loss(
                drafter,
                taps=taps,
                input_ids=ids,
                loss_mask=mask,
                anchors=H.sample_anchors(mask, ANCHORS),
                embed_weight=embed,
                lm_head_weight=head,
                block_size=b,
                mask_token_id=drafter.mask_token_id,
                weights=weights,
            ).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    return drafter.eval()
