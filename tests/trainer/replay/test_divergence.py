"""Divergence classification against a MockTransport baseline (it fakes vLLM's top-2 log-probabilities)."""

from __future__ import annotations

import json

import httpx

from trainer.precision import NearTieRule
from trainer.replay.calls import ReplayCall
from trainer.replay.client import Outcome
from trainer.replay.divergence import classify, first_difference


def baseline(gap: float, seen: list[dict]) -> httpx.AsyncClient:  # type: ignore[type-arg]
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        top = {"a": -0.5, "b": -0.5 - gap}
        return httpx.Response(200, json={"choices": [{"logprobs": {"top_logprobs": [top]}}]})

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


async def test_a_divergence_is_a_near_tie_or_a_mismatch_by_the_baselines_top2_gap() -> None:
    call = ReplayCall("c", "codex", "en", 8, 8, [7, 8, 9])
    base = Outcome("c", "plain", 1, "codex/en", token_ids=[1, 2, 3])
    mine = Outcome("c", "dflash", 1, "codex/en", token_ids=[1, 2, 4])
    seen: list[dict] = []  # type: ignore[type-arg]
    async with baseline(0.01, seen) as client:
        tie = await classify(client, "http://plain", "m", call, base, mine)
    assert tie is not None
    assert (tie.kind, tie.position, tie.baseline_token, tie.endpoint_token) == ("near_tie", 2, 3, 4)
    assert seen[0]["prompt"] == [
        7,
        8,
        9,
        1,
        2,
    ]  # the prompt and the common prefix: the token before the split
    assert seen[0]["logprobs"] == 2
    async with baseline(2.0, []) as client:
        wide = await classify(client, "http://plain", "m", call, base, mine)
    assert wide is not None
    assert wide.kind == "mismatch"
    assert await classify(client, "http://plain", "m", call, base, base) is None


def raw_logits(top: float, gap: float) -> httpx.AsyncClient:
    """A baseline started with --logprobs-mode raw_logits: its top values are logits, not log-probabilities."""

    def handler(request: httpx.Request) -> httpx.Response:
        values = {"a": top, "b": top - gap}
        return httpx.Response(200, json={"choices": [{"logprobs": {"top_logprobs": [values]}}]})

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_in_bfloat16_a_gap_of_two_steps_at_the_top_logits_magnitude_is_a_near_tie() -> None:
    """What vLLM CPU in bf16 produced: 0.25 nats at a top logit of 40 is one bf16 step (0.25 at 32-64)."""
    call = ReplayCall("c", "codex", "en", 8, 8, [7, 8, 9])
    base = Outcome("c", "plain", 1, "codex/en", token_ids=[1, 2, 3])
    mine = Outcome("c", "dflash", 1, "codex/en", token_ids=[1, 2, 4])
    bf16 = NearTieRule("bfloat16")
    async with raw_logits(40.0, 0.25) as client:
        tie = await classify(client, "http://plain", "m", call, base, mine, bf16, logits=True)
        unknown = await classify(client, "http://plain", "m", call, base, mine, bf16, logits=False)
    assert tie is not None
    assert unknown is not None
    assert (tie.kind, tie.top_logit, tie.threshold) == ("near_tie", 40.0, 0.5)
    assert (unknown.kind, unknown.threshold) == ("mismatch", 0.1)  # logprobs only: the floor alone
    async with raw_logits(40.0, 1.5) as client:
        wide = await classify(client, "http://plain", "m", call, base, mine, bf16, logits=True)
    assert wide is not None
    assert wide.kind == "mismatch"  # six steps: not rounding
