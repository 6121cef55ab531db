"""Re-sampled completions (trainer/regenerate.py) as training sequences, on their source call's side of the
held-out split: the split is made over what the agents recorded, and a re-sample never crosses it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from records.sequences import Sequence
from records.sequences import resampled as resampled_sequence
from trainer.data.records import CallExample


def attach_regenerated(
    resampled: list[CallExample], merged: list[Sequence], dropped: Counter[str]
) -> list[Sequence]:
    """One sequence per re-sample: its source call's prompt, then the engine's completion (supervised), on
    the source's side of the split (``merged`` is split already). Re-samples of held-out calls are
    dropped and counted, so the held-out side stays exactly what the agents recorded."""
    source = {cid: s for s in merged for cid in s.call_ids}
    out: list[Sequence] = []
    for ex in resampled:
        src = source.get(str(ex.regenerated_from))
        if src is None:
            dropped["regenerated_source_not_kept"] += 1
            continue
        if src.held_out:
            dropped["regenerated_of_held_out_call"] += 1
            continue
        out.append(
            resampled_sequence(
                ex.call_id, str(ex.regenerated_from), ex.prompt_ids, ex.completion_ids, src, ex.supervise
            )
        )
    return out


def regenerated_report(
    resampled: list[CallExample], attached: list[Sequence], train: list[Sequence]
) -> dict[str, Any]:
    """What the re-samples added to the training side (after cuts and the anchor filter)."""
    ids = {e.call_id for e in resampled}
    regen = [s for s in train if s.call_ids and s.call_ids[0] in ids]
    recorded = sum(s.supervised for s in train) - sum(s.supervised for s in regen)
    added = sum(s.supervised for s in regen)
    return {
        "rows": len(resampled),
        "sequences_attached": len(attached),
        "sequences_trained": len(regen),
        "supervised_tokens_recorded": recorded,
        "supervised_tokens_regenerated": added,
        "multiplier": round((recorded + added) / recorded, 2) if recorded else None,
    }
