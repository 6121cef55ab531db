"""The judgement: bootstrap intervals over calls, paired differences, ranking only what is resolved, and
nothing ranked below the floor of draft steps (trainer/replay/judge.py), on counters built here."""

from __future__ import annotations

import random

from trainer.replay.client import Outcome
from trainer.replay.counters import SpecCounters
from trainer.replay.divergence import Divergence, attribute
from trainer.replay.evidence import distinct_ngram_ratio, longest_repeat_run
from trainer.replay.judge import judge
from trainer.replay.run import LevelRun, ReplayRun, Served

K = 4  # draft positions


def _outcome(label: str, call: int, drafts: int, accept: float, rng: random.Random) -> Outcome:
    """A call whose drafts each accept a prefix of mean length about `accept` (0..K)."""
    per_pos = [0.0] * K
    for _ in range(drafts):
        n = min(K, max(0, round(rng.gauss(accept, 0.8))))
        for k in range(n):
            per_pos[k] += 1
    spec = SpecCounters(drafts, drafts * K, sum(per_pos), tuple(per_pos)) if label != "plain" else None
    tokens = drafts * 2 if spec is None else int(drafts + sum(per_pos))
    return Outcome(
        f"c{call}",
        label,
        1,
        "claude-code/en" if call % 2 else "codex/ko",
        completion_tokens=tokens,
        ttft=0.1,
        seconds=0.1 + tokens / 50,
        spec=spec,
    )


def _run(means: dict[str, float], calls: int, drafts: int, seed: int = 0) -> ReplayRun:
    rng = random.Random(seed)
    served = [Served(lab, "http://x", "m", "m", None, lab != "plain", lab != "plain") for lab in means]
    runs = [
        LevelRun(lab, 1, [_outcome(lab, i, drafts, mean, rng) for i in range(calls)], 1.0, None)
        for lab, mean in means.items()
    ]
    return ReplayRun(served, runs)


GROUPS = {
    f"c{i}": {"agent": "claude-code" if i % 2 else "codex", "language": "en" if i % 2 else "ko"}
    for i in range(40)
}


def test_a_clear_difference_is_ranked_and_a_tie_is_not_resolved() -> None:
    result = _run({"plain": 0, "good": 2.5, "bad": 0.5, "bad2": 0.5}, calls=40, drafts=60)
    j = judge(result, ["good", "bad", "bad2"], "plain", GROUPS, floor=1000, resamples=500)
    assert j["ranked"] is True
    assert j["calls"] == 40
    good = j["methods"]["good"]
    assert good["draft_steps"] == 2400
    lo, hi = good["mal_ci"]
    assert lo <= good["mal"] <= hi
    assert hi - lo < 0.5  # 2,400 steps: a narrow interval
    assert len(good["per_position_acceptance"]) == len(good["per_position_ci"]) == K
    pairs = {(p["a"], p["b"]): p for p in j["pairs"]}
    assert pairs["good", "bad"]["resolved"]
    assert pairs["good", "bad"]["verdict"] == "good > bad"
    assert pairs["good", "bad"]["ci"][0] > 0
    tie = pairs["bad", "bad2"]  # the same policy, different draws: inside the noise
    assert not tie["resolved"]
    assert tie["verdict"] == "not resolved"
    assert tie["ci"][0] < 0 < tie["ci"][1]
    assert set(good["by"]) == {"agent:claude-code", "agent:codex", "language:en", "language:ko"}
    assert good["speedup_ci"] is not None


def test_below_the_floor_nothing_is_ranked_even_a_clear_difference() -> None:
    result = _run({"plain": 0, "good": 3.0, "bad": 0.2}, calls=6, drafts=20)  # 120 steps each
    j = judge(result, ["good", "bad"], "plain", GROUPS, floor=1000, resamples=300)
    assert j["ranked"] is False
    assert j["verdict"].startswith("too small to rank: good 120 draft steps, bad 120 draft steps")
    assert [p["verdict"] for p in j["pairs"]] == ["not ranked (below the floor)"]


def test_without_concurrency_one_there_is_nothing_to_judge() -> None:
    result = _run({"plain": 0, "good": 2.0}, calls=4, drafts=10)
    for r in result.runs:
        r.concurrency = 8
    j = judge(result, ["good"], "plain", GROUPS, floor=10)
    assert j["ranked"] is False
    assert "concurrency 1" in j["verdict"]


def test_an_endpoint_that_died_is_left_out_and_the_others_judged() -> None:
    """A drafter's server killed mid-bench (OOM) has no concurrency-1 run: the others are still judged."""
    result = _run({"plain": 0, "good": 2.5, "bad": 0.5}, calls=40, drafts=60)
    j = judge(result, ["good", "bad", "dead"], "plain", GROUPS, floor=1000, resamples=300)
    assert j["not_judged"] == ["dead"]
    assert set(j["methods"]) == {"good", "bad"}
    assert j["calls"] == 40
    assert j["ranked"] is True


def test_degeneracy_figures() -> None:
    assert distinct_ngram_ratio(list(range(10))) == 1.0
    assert distinct_ngram_ratio([7] * 10) == 1 / 7
    assert distinct_ngram_ratio([1, 2]) is None
    assert longest_repeat_run([1, 2, 3, 4]) == 0
    assert longest_repeat_run([9, 5, 5, 5, 5, 1]) == 4
    assert longest_repeat_run([0, 1, 2, 1, 2, 1, 2, 3]) == 6  # "1 2" three times


def test_a_divergence_a_model_free_method_shares_is_the_engines() -> None:
    def d(endpoint: str, call: str, level: int = 1, at: int = 3) -> Divergence:
        return Divergence(call, endpoint, level, at, 1, 2, 0.5, "mismatch")

    found = attribute(
        [d("ngram", "a"), d("dflash", "a"), d("dflash", "b"), d("dflash", "a", 8), d("dflash", "a", at=9)],
        ["ngram"],
    )
    # the drafter's divergence is the engine's only where ngram parts at the same token of the same call
    assert [x.kind for x in found] == ["engine", "engine", "mismatch", "mismatch", "mismatch"]
