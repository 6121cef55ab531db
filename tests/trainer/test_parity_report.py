"""What the parity gate prints: an inconclusive drafter check is said as such, with the throwaway's verdict
(the checks themselves run against real vLLM: tests/serving/test_parity_vllm.py)."""

from __future__ import annotations

from typing import Any

from trainer.parity_cli import _likely_inconclusive, _line
from trainer.parity_settings import ParitySettings


def _check(status: str, ours: float, engine: float) -> dict[str, Any]:
    return {
        "status": status,
        "ok": status == "passed",
        "our_acceptance_length": ours,
        "engine_mal": engine,
        "relative_gap": abs(ours - engine) / engine,
        "threshold": 0.05,
        "min_mal": 1.1,
        "prompt_tokens": [1024, 13491],
    }


def test_an_inconclusive_check_and_its_throwaway_are_said_not_passed() -> None:
    report = {
        "target": {
            "mean_abs_logprob_diff": 0.02,
            "greedy_agreement": 1.0,
            "tokens": 14515,
            "ok": True,
            "thresholds": {"mean_abs_logprob_diff": 0.05, "greedy_agreement": 0.98},
        },
        "drafter": _check("inconclusive", 1.0, 1.0),
        "throwaway": _check("failed", 3.2, 1.4),
        "served": {
            "kind": "dflash",
            "method": "dflash",
            "draft_tokens": 7,
            "engine": "vLLM",
            "dtype": "bfloat16",
            "note": None,
        },
    }
    text = _line(report)
    assert "on prompts of 1024, 13491 tokens: INCONCLUSIVE — both accept too little (MAL under 1.1)" in text
    assert "(b') throwaway" in text
    assert "FAILED — the export path NOT proven: the export path is broken" in text
    assert "PASSED" not in text
    assert "served: dflash as method dflash, 7 draft tokens, by vLLM in bfloat16" in text


def test_a_drafter_that_does_not_read_its_context_is_said_inconclusive_for_that_reason() -> None:
    check = {**_check("inconclusive", 1.47, 1.47), "why_inconclusive": "does not read its context"}
    target = {
        "mean_abs_logprob_diff": 0.02,
        "greedy_agreement": 1.0,
        "tokens": 100,
        "ok": True,
        "thresholds": {"mean_abs_logprob_diff": 0.05, "greedy_agreement": 0.98},
    }
    text = _line({"target": target, "drafter": check})
    assert "gap 0.0 (≤ 0.05)" in text
    assert "INCONCLUSIVE — the drafter does not read its context (d)" in text
    assert "accept too little" not in text


def test_the_throwaway_is_foreseen_from_c_and_d_before_any_server_starts() -> None:
    s = ParitySettings()  # min_mal 1.1

    def features(accepts: float, sensitive: bool) -> dict[str, Any]:
        return {"sensitivity": {"teacher_forced_acceptance": {"export": accepts}, "sensitive": sensitive}}

    assert _likely_inconclusive(features(1.02, True), s)  # accepts too little
    assert _likely_inconclusive(features(2.7, False), s)  # blind to its context
    assert not _likely_inconclusive(features(2.7, True), s)  # (b) can judge it: no throwaway up front
    assert not _likely_inconclusive({"ok": True, "skipped": "no export"}, s)
