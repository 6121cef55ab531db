"""Why two greedy outputs of the same target differ: a near-tie, or a bug.

Speculative decoding is lossless in exact arithmetic, but a verify pass over k+1 tokens and a plain decode
step run different kernel shapes, and their rounding (bf16 above all) can flip the argmax where the target's
top two tokens are nearly tied. So a divergence is judged by the target itself: at the first position where
the outputs part, the baseline endpoint is asked for its top-2 log-probabilities after the common prefix
(prefix-cached, one token). A gap within the precision the engine computes in (trainer/precision.py: a
floor in nats, or a few steps of its dtype at the top logit's magnitude when the baseline serves raw
logits) is a near-tie, reported. A wider gap on a call where a model-free method (ngram, suffix) parts from
the baseline too is the engine's numerics — a lookup drafter cannot change a correct engine's argmax —
reported as `engine`. Anything else means the two endpoints do not decode the same model, and the replay
refuses the comparison.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import httpx

from trainer.precision import NearTieRule
from trainer.replay.calls import ReplayCall
from trainer.replay.client import Outcome


@dataclass
class Divergence:
    call_id: str
    endpoint: str
    concurrency: int
    position: int  # index in the completion of the first differing token
    baseline_token: int | None
    endpoint_token: int | None
    top2_gap: float | None  # nats; None when the baseline gave no log-probabilities there
    kind: str  # near_tie | engine | mismatch | unclassified (text-only outputs: no ids to compare)
    top_logit: float | None = None  # the baseline's top logit there (raw-logits mode only)
    threshold: float | None = None  # the near-tie rule's bound at that magnitude

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


async def top2_gap(
    client: httpx.AsyncClient, url: str, model: str, prompt: list[int], logits: bool = False
) -> tuple[float | None, float | None]:
    """(log p(top-1) − log p(top-2), |top-1 logit| or None) of the next token after `prompt`, as the endpoint
    computes it. The difference is the same for logits and log-probabilities; the magnitude is known only
    when the endpoint serves raw logits (`logits`)."""
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 2}
    reply = await client.post(f"{url}/v1/completions", json=body)
    if reply.status_code >= 400:
        return None, None
    try:
        top = reply.json()["choices"][0]["logprobs"]["top_logprobs"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None, None
    values = sorted((float(v) for v in (top or {}).values()), reverse=True)
    if len(values) < 2:
        return None, None
    return values[0] - values[1], abs(values[0]) if logits else None


async def classify(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    call: ReplayCall,
    base: Outcome,
    mine: Outcome,
    rule: NearTieRule | None = None,
    logits: bool = False,
) -> Divergence | None:
    """The divergence of `mine` from `base` on `call`, classified; None when the outputs agree."""
    if mine.output() == base.output():
        return None
    if base.token_ids is None or mine.token_ids is None or call.prompt_ids is None:
        return Divergence(call.call_id, mine.endpoint, mine.concurrency, 0, None, None, None, "unclassified")
    at = first_difference(base.token_ids, mine.token_ids)
    if at is None:
        return None
    rule = rule or NearTieRule()
    gap, top = await top2_gap(client, base_url, model, [*call.prompt_ids, *base.token_ids[:at]], logits)
    pick = lambda ids: ids[at] if at < len(ids) else None  # noqa: E731
    kind = "near_tie" if rule.is_near_tie(gap, top) else "mismatch"
    return Divergence(
        call.call_id,
        mine.endpoint,
        mine.concurrency,
        at,
        pick(base.token_ids),
        pick(mine.token_ids),
        gap,
        kind,
        top,
        rule.threshold(top),
    )


def attribute(found: list[Divergence], model_free: list[str]) -> list[Divergence]:
    """Mismatches a model-free method shows, and a drafter's where one of those parts from the baseline at
    the same token of the same call and level, are the engine's (`engine`): they do not refuse the
    comparison. A drafter's divergence anywhere else is its own."""
    witnessed = {(d.call_id, d.concurrency, d.position) for d in found if d.endpoint in model_free}
    for d in found:
        seen = (d.call_id, d.concurrency, d.position) in witnessed
        if d.kind == "mismatch" and (d.endpoint in model_free or seen):
            d.kind = "engine"
    return found
