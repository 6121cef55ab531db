"""The one place this project's tap ids and vLLM's auxiliary hidden-state ids are converted.

This project's tap id k is the OUTPUT of decoder layer k (`lm.taps`). vLLM numbers the same tensor
as the INPUT of layer k + 1 (`eagle_aux_hidden_state_layer_ids`), and its extraction for DFlash appends
`num_layers` — the last layer's output before the final norm, which speculators reads as the verifier's
last hidden state. So the server is launched with `[k + 1 for k in taps] + [num_layers]` and every file
it writes holds those slots in that order.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer.sources.base import FeatureError


class TapNumberingError(FeatureError, ValueError):
    """The hidden states a server extracts are not the taps the drafter reads."""


def to_vllm(taps: Sequence[int], num_layers: int, *, include_last_layer: bool = True) -> list[int]:
    """This project's tap ids → the aux ids to launch vLLM with (the final layer appended)."""
    bad = [k for k in taps if not 0 <= k <= num_layers - 2]
    if bad:
        raise TapNumberingError(f"tap ids {bad} out of range 0..{num_layers - 2} for {num_layers} layers")
    aux = [int(k) + 1 for k in taps]
    return [*aux, num_layers] if include_last_layer else aux


def from_vllm(aux: Sequence[int], num_layers: int, *, include_last_layer: bool = True) -> list[int]:
    """vLLM aux ids (as launched) → this project's tap ids (the appended final layer dropped)."""
    aux = list(aux)
    if include_last_layer:
        if not aux or aux[-1] != num_layers:
            raise TapNumberingError(
                f"vLLM aux ids {aux} do not end with the final layer {num_layers} (launch vLLM with the "
                "final layer appended, as speculators' launch_vllm.py --include-last-layer does)"
            )
        aux = aux[:-1]
    bad = [i for i in aux if not 1 <= i <= num_layers - 1]
    if bad:
        raise TapNumberingError(f"vLLM aux ids {bad} are not inputs of layers 1..{num_layers - 1}")
    return [i - 1 for i in aux]


def check_launch(taps: Sequence[int], launched: Sequence[int], num_layers: int) -> None:
    """Refuse a server launched with other aux ids than the drafter's taps need, naming both."""
    want = to_vllm(taps, num_layers)
    if list(launched) != want:
        raise TapNumberingError(
            f"the vLLM server extracts aux ids {list(launched)} but the drafter's taps {list(taps)} "
            f"(outputs of layers k) are vLLM aux ids {want} (inputs of layers k+1, then the final layer "
            f"{num_layers}); relaunch with eagle_aux_hidden_state_layer_ids={want}"
        )
