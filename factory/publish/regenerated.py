"""Re-sampled completions (`python -m trainer regenerate`, DATA_DIR/regenerated/) published as `sequences` rows
with `source` = `regenerated`, so a user holding only the dataset trains on what `make train` trains on.

A re-sample is published only when its source call is a published, trained call on the `train` side and its
prompt ids are that call's published ids (hash-compared): regeneration reads the exported calls, so its
prompts are the scrubbed ones; a re-sample made from unexported records could carry a secret the export cut
out, and is left out (counted). Re-samples of held-out calls never leave: the test side stays what the
agents recorded."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from factory.publish.trajectories import ids_hash
from records.io import read_batches
from records.sequences import Sequence, resampled, untrainable
from records.split import TRAIN

_COLUMNS = (
    "call_id",
    "regenerated_from",
    "prompt_token_ids",
    "completion_token_ids",
    "outcome",
    "status_code",
    "prompt_tokens",
    "completion_tokens",
    "tag",
)


@dataclass
class Sources:
    """Every published trained call: the sequence it is in and its prompt's hash."""

    of_call: dict[str, tuple[Sequence, bytes]] = field(default_factory=dict)

    def note(self, seq: Sequence, prompt_hashes: dict[str, bytes]) -> None:
        meta = Sequence([], [], [], [], seq.session_id, seq.repo, seq.agent, seq.lang, split=seq.split)
        for cid in seq.call_ids:
            self.of_call[cid] = (meta, prompt_hashes[cid])


def publishable(folder: Path | None, sources: Sources, skipped: Counter[str]) -> Iterator[Sequence]:
    """The re-samples under `folder` that may be published, as sequences (the others counted by reason)."""
    if folder is None:
        return
    for _, table in read_batches(folder, _COLUMNS, batch_size=64):
        for row in table.to_pylist():
            why = untrainable(row)
            found = sources.of_call.get(str(row.get("regenerated_from")))
            if why is None and found is None:
                why = "source_call_not_published"
            elif why is None and found is not None and found[0].split != TRAIN:
                why = "source_call_held_out"
            elif why is None and found is not None and ids_hash(row["prompt_token_ids"]) != found[1]:
                why = "prompt_differs_from_published"
            if why is not None or found is None:
                skipped[why or "source_call_not_published"] += 1
                continue
            yield resampled(
                str(row["call_id"]),
                str(row["regenerated_from"]),
                row["prompt_token_ids"],
                row["completion_token_ids"],
                found[0],
            )
