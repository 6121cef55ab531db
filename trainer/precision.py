"""When is a flipped greedy token the engine's rounding and not a bug? One rule, for `trainer eval`, the
parity gate and the replay alike.

Speculative decoding is lossless in exact arithmetic, but a verify pass over k+1 tokens and a plain decode
step run different kernel shapes (and batch shapes), and each rounds the logits its own way. How far a
logit can move is set by the precision the engine computes in, relative to the logit's magnitude: one
bfloat16 step (7 stored mantissa bits) at a logit of 16–32 is 0.125, at 32–64 it is 0.25 — gaps a fixed
0.1-nat rule calls a mismatch. So a divergence whose target top-2 gap is at most `ULPS` steps of the
engine's dtype at the top logit's magnitude is a near-tie; `floor` nats (0.1 by default: float32's steps
are far finer, but kernels still reorder sums) is the least the rule allows. When the magnitude is unknown
(an engine that returns log-probabilities only) the floor alone applies, and the rule says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NEAR_TIE = 0.1  # nats: the floor of the rule, what float32 engines get
ULPS = 2  # steps of the dtype at the top logit's magnitude: one rounding on each side of the comparison
MANTISSA_BITS = {"float32": 23, "bfloat16": 7, "float16": 10}


def dtype_name(dtype: object) -> str:
    """'bfloat16' for torch.bfloat16, 'bfloat16', 'bf16'; 'float32' for float32 and unknown names."""
    name = str(dtype).removeprefix("torch.")
    return {"bf16": "bfloat16", "half": "float16", "fp16": "float16", "float": "float32"}.get(name, name)


def step(magnitude: float, dtype: str) -> float:
    """The spacing of `dtype`'s values at `magnitude` (one unit in the last place)."""
    bits = MANTISSA_BITS.get(dtype_name(dtype), 23)  # an unknown name: float32
    if magnitude == 0 or not math.isfinite(magnitude):
        return 0.0
    return 2.0 ** (math.floor(math.log2(abs(magnitude))) - bits)


@dataclass(frozen=True)
class NearTieRule:
    dtype: str = "float32"
    floor: float = NEAR_TIE
    ulps: int = ULPS

    def threshold(self, magnitude: float | None) -> float:
        """The largest top-2 gap (nats) that is a near-tie at a top logit of `magnitude`."""
        if magnitude is None:
            return self.floor
        return max(self.floor, self.ulps * step(magnitude, self.dtype))

    def is_near_tie(self, gap: float | None, magnitude: float | None) -> bool:
        return gap is not None and gap <= self.threshold(magnitude)

    def describe(self) -> str:
        return (
            f"a top-2 gap of at most max({self.floor} nats, {self.ulps} {dtype_name(self.dtype)} steps at "
            "the top logit's magnitude) is a near-tie"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "dtype": dtype_name(self.dtype),
            "floor_nats": self.floor,
            "ulps": self.ulps,
            "rule": self.describe(),
        }
