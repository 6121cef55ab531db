"""The near-tie rule follows the precision the engine computes in (trainer/precision.py)."""

from __future__ import annotations

import pytest

from trainer.precision import NEAR_TIE, NearTieRule, dtype_name, step


def test_a_dtype_step_is_relative_to_the_magnitude() -> None:
    assert step(20.0, "bfloat16") == 0.125  # 16 ≤ |x| < 32: 2**(4 - 7)
    assert step(40.0, "bfloat16") == 0.25
    assert step(-40.0, "torch.bfloat16") == 0.25
    assert step(40.0, "float32") == pytest.approx(2.0**-18)
    assert step(0.0, "bfloat16") == 0.0


def test_the_gaps_bf16_produced_are_near_ties_and_a_real_gap_is_not() -> None:
    bf16 = NearTieRule("bfloat16")
    # measured on a bf16 CPU: divergences at top-2 gaps of 0.125 and 0.25 nats, logits of 16-64
    assert bf16.is_near_tie(0.125, 20.0)
    assert bf16.is_near_tie(0.25, 40.0)
    assert not bf16.is_near_tie(1.5, 40.0)  # six steps: a bug, not rounding
    assert not bf16.is_near_tie(0.25, 10.0)  # at 8-16 one step is 0.0625: four steps is too many
    assert not bf16.is_near_tie(None, 40.0)  # no gap measured: never excused


def test_float32_and_an_unknown_magnitude_keep_the_floor() -> None:
    fp32 = NearTieRule("float32")
    assert fp32.threshold(40.0) == NEAR_TIE
    assert NearTieRule("bfloat16").threshold(None) == NEAR_TIE  # logprobs only: the magnitude is unknown
    assert NearTieRule("bfloat16", floor=0.3).threshold(20.0) == 0.3
    assert dtype_name("torch.bfloat16") == dtype_name("bf16") == "bfloat16"
    assert "bfloat16" in NearTieRule("bf16").describe()
