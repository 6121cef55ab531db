"""Why two greedy outputs of the same target differ: a near-tie, or a bug.

Speculative decoding is lossless in exact arithmetic, but a verify pass over k+1 tokens and a plain decode
step run different kernel shapes, and their rounding (bf16 above all) can flip the argmax where the target's
top two tokens are nearly tied. So a divergence is judged by the target itself: at the first position where
the outputs part, the baseline endpoint is asked for its top-2 log-probabilities after the common prefix
(prefix-cached, one token). A gap under `near_tie` nats is a near-tie, reported; anything wider means the
two endpoints do not decode the same model, and the replay refuses the comparison.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import httpx

from trainer.replay.calls import ReplayCall
from trainer.replay.client import Outcome

NEAR_TIE = 0.1  # nats between the target's top-2 log-probabilities


@dataclass
class Divergence:
    call_id: str
    endpoint: str
    concurrency: int
    position: int  # index in the completion of the first differing token
    baseline_token: int | None
    endpoint_token: int | None
    top2_gap: float | None  # nats; None when the baseline gave no log-probabilities there
    kind: str  # near_tie | mismatch | unclassified (text-only outputs: no ids to compare)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


async def top2_gap(client: httpx.AsyncClient, url: str, model: str, prompt: list[int]) -> float | None:
    """log p(top-1) − log p(top-2) of the next token after `prompt`, as the endpoint computes it."""
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 2}
    reply = await client.post(f"{url}/v1/completions", json=body)
    if reply.status_code >= 400:
        return None
    try:
        top = reply.json()["choices"][0]["logprobs"]["top_logprobs"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    values = sorted((float(v) for v in (top or {}).values()), reverse=True)
    return values[0] - values[1] if len(values) >= 2 else None


async def classify(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    call: ReplayCall,
    base: Outcome,
    mine: Outcome,
    near_tie: float = NEAR_TIE,
) -> Divergence | None:
    """The divergence of `mine` from `base` on `call`, classified; None when the outputs agree."""
    if mine.output() == base.output():
        return None
    if base.token_ids is None or mine.token_ids is None or call.prompt_ids is None:
        return Divergence(call.call_id, mine.endpoint, mine.concurrency, 0, None, None, None, "unclassified")
    at = first_difference(base.token_ids, mine.token_ids)
    if at is None:
        return None
    gap = await top2_gap(client, base_url, model, [*call.prompt_ids, *base.token_ids[:at]])
    pick = lambda ids: ids[at] if at < len(ids) else None  # noqa: E731
    kind = "near_tie" if gap is not None and gap < near_tie else "mismatch"
    return Divergence(call.call_id, mine.endpoint, mine.concurrency, at, pick(base.token_ids),
                      pick(mine.token_ids), gap, kind)  # fmt: skip
