"""Is a speculative decode the target's own greedy decode? Divergences classified as near-ties or bugs.

Speculative decoding is lossless in exact arithmetic, but a verify pass over B tokens and a plain decode
step run different kernel shapes, and their rounding (bf16 above all) can flip the argmax where the
target's top two tokens are nearly tied. So each divergence is judged by the target itself: at the first
differing position, its top-2 log-probability gap after the common prefix (in its own numerics), judged by
the precision it computes in (trainer/precision.py: a few steps of its dtype at the top logit's magnitude,
never under the rule's floor). Within that it is a near-tie; the plain decode then continues from the speculative token, and what
follows is compared again, so a real bug after a near-tie is still caught. A wider gap is a mismatch.
(``trainer.replay.divergence`` applies the same rule to two serving endpoints.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainer.precision import NearTieRule
from trainer.replay.divergence import first_difference


@dataclass
class Divergence:
    position: int  # index in the completion of the differing token
    top2_gap: float  # nats, the target's log p(top-1) − log p(top-2) there
    kind: str  # near_tie | mismatch
    top_logit: float | None = None  # the top logit's magnitude there, which sets the dtype's step


@torch.no_grad()
def top2_gap(target: Any, ids: list[int]) -> tuple[float, float]:
    """(log p(top-1) − log p(top-2), |top-1 logit|) of the target's next token after ``ids``, in its own
    numerics."""
    dev = target.embed_tokens.weight.device
    out = target.forward(torch.tensor([ids], device=dev), None, logits_to_keep=1)
    logits = out.logits[0, -1]
    top = torch.log_softmax(logits.float(), -1).topk(2).values
    return float(top[0] - top[1]), abs(float(logits.float().max()))


def divergences(
    target: Any,
    prompt: list[int],
    plain: list[int],
    spec: list[int],
    decode: Callable[[list[int], int], list[int]],
    rule: NearTieRule | None = None,
) -> list[Divergence]:
    """Every divergence of ``spec`` from the target's greedy decode, up to the first mismatch.
    ``decode(prompt, n)``: the target's plain greedy decode of up to n tokens after ``prompt``."""
    rule = rule or NearTieRule(str(target.embed_tokens.weight.dtype))
    found: list[Divergence] = []
    ref, offset, budget = plain, 0, max(len(plain), len(spec))  # the decode's token budget
    while (k := first_difference(ref, spec[offset:])) is not None:
        at = offset + k
        gap, top = top2_gap(target, [*prompt, *spec[:at]])
        found.append(Divergence(at, gap, "near_tie" if rule.is_near_tie(gap, top) else "mismatch", top))
        if found[-1].kind == "mismatch" or at >= len(spec) or at + 1 >= budget:
            break
        offset = at + 1  # the target's greedy decode again, from the speculative token on
        ref = decode([*prompt, *spec[:offset]], budget - offset)
    return found
