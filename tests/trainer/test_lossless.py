"""The lossless check's judge: a divergence from the target's greedy decode is a near-tie or a mismatch by
the target's own top-2 gap, and the comparison goes on after a near-tie (a later bug is still found)."""

from __future__ import annotations

import math

import pytest
import torch

from lm.engine import Engine, SamplingParams
from tests.trainer.dflash.tiny import tiny_target
from trainer.lossless import divergences, top2_gap
from trainer.precision import NearTieRule

PROMPT = [5, 17, 99, 3, 42, 8, 61]


def test_divergences_are_judged_by_the_targets_top2_gap_and_followed_past_a_near_tie() -> None:
    target = tiny_target()
    engine = Engine(target)

    def decode(ids: list[int], n: int) -> list[int]:
        params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
        return [t for s in engine.steps(ids, params) for t in s.token_ids]

    plain = decode(PROMPT, 12)
    assert divergences(target, PROMPT, plain, plain, decode) == []
    k = 4
    other = (plain[k] + 1) % target.vocab_size
    spec = [*plain[:k], other, *decode([*PROMPT, *plain[:k], other], 12 - k - 1)]  # one flipped argmax
    gap, top = top2_gap(target, [*PROMPT, *plain[:k]])
    assert gap > 0
    assert top > 0
    [tie] = divergences(target, PROMPT, plain, spec, decode, NearTieRule(floor=math.inf))
    assert (tie.position, tie.kind) == (k, "near_tie")
    assert tie.top2_gap == gap
    assert tie.top_logit == top
    [bad] = divergences(target, PROMPT, plain, spec, decode, NearTieRule(floor=0.0))
    assert (bad.position, bad.kind) == (k, "mismatch")
    # the same gap in bfloat16 arithmetic: a near-tie when it is within 2 of bf16's steps at that logit
    coarse = NearTieRule("bfloat16", floor=0.0)
    [judged] = divergences(target, PROMPT, plain, spec, decode, coarse)
    assert judged.kind == ("near_tie" if gap <= coarse.threshold(top) else "mismatch")
    # a second, later divergence after the near-tie is found too, not hidden by the first
    worse = [*spec[: k + 3], (spec[k + 3] + 1) % target.vocab_size, *spec[k + 4 :]]
    found = divergences(target, PROMPT, plain, worse, decode, NearTieRule(floor=gap + 1e-6))
    assert [d.position for d in found][:2] == [k, k + 3]
    assert found[0].kind == "near_tie"


def test_top2_gap_is_the_log_probability_margin() -> None:
    target = tiny_target()
    with torch.no_grad():
        logits = target.model(torch.tensor([PROMPT])).logits[0, -1]
    top = torch.log_softmax(logits.float(), -1).topk(2).values
    gap, magnitude = top2_gap(target, PROMPT)
    assert abs(gap - float(top[0] - top[1])) < 1e-5
    assert magnitude == pytest.approx(abs(float(logits.float().max())), rel=1e-5)  # sets the dtype's step
