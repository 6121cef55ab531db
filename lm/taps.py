"""The tap convention: which decoder layers' outputs a DFlash drafter reads, and what "tap k" means.

Tap id k is the OUTPUT of decoder layer k (Hugging Face `hidden_states[k + 1]`); vLLM numbers the same
feature as the input of layer k + 1. The target wrapper (`lm.model.Target.tap`) captures these, the
drafter (`trainer.dflash`) is configured with them, and the export writes them as `target_layer_ids`.
"""

from __future__ import annotations


def default_target_layer_ids(num_target_layers: int, num_taps: int) -> list[int]:
    """Tap ids spread evenly from 1 to n-3 (Qwen3-8B, 36 layers, 5 taps: [1, 9, 17, 25, 33]).

    One tap sits in the middle. Ids never reach the last layer: vLLM captures tap k as the input of layer
    k+1, which the last layer does not have (and Hugging Face's last hidden state is post-final-norm). For
    very shallow (test) targets the range is widened to 0..n-2.
    """
    n = num_target_layers
    if n < 2:
        raise ValueError(f"the target needs at least 2 layers to tap, has {n}")
    if num_taps < 1:
        raise ValueError("num_taps must be at least 1")
    last = n - 2  # highest id whose feature is pre-final-norm
    if num_taps == 1:
        return [min(n // 2, last)]
    start, end = 1, n - 3
    if end - start + 1 < num_taps:
        start, end = 0, last
    if end - start + 1 < num_taps:
        raise ValueError(f"cannot pick {num_taps} distinct taps from a {n}-layer target")
    span = end - start
    # Python's round(), as the reference spread uses (so .5 cases round to even exactly as it does)
    return [round(start + i * span / (num_taps - 1)) for i in range(num_taps)]
