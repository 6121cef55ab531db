"""The training sequence: the one definition the export publishes (`sequences` config) and the trainer trains on.

- **Which calls are trained on** (`untrainable`): a call that succeeded, is not tagged (a translation call),
  carries both prompt and completion ids, and whose ids agree with the usage the target reported (unless a
  secret inside them was redacted, which changes their length). The trainer adds one check only it can
  make: every id inside its target's vocabulary.
- **The session merge** (`SessionMerge`): an agent resends its whole history with every call. When a
  call's prompt begins, token for token, with an earlier call's prompt + completion, the two become one
  sequence with two supervised spans, so the target runs once over the session instead of once per call.
  Calls are taken in the order they were made; each joins the longest chain its prompt extends, or starts
  one. A sequence holds the chain's last prompt + completion; the loss mask is 1 on the target's own ids.
- **Re-sampled completions** (`resampled`): a recorded prompt with a completion the serving engine drew
  again (`python -m trainer regenerate`) is a sequence of its own, on its source call's side of the split.

The held-out split is `records.split`'s; a sequence carries its session's side (`train` / `test`).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence as Seq
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from records.agents import OTHER_AGENT
from records.schema import SCHEMA_VERSION, VERSION_KEY
from records.split import TEST, TRAIN

RECORDED, REGENERATED = "recorded", "regenerated"
_IDS = pa.list_(pa.int32())

SEQUENCES_SCHEMA = pa.schema(
    [
        ("sequence_id", pa.string()),
        ("input_ids", _IDS),
        ("loss_mask", pa.list_(pa.int8())),
        ("span_starts", _IDS),
        ("span_ends", _IDS),
        ("call_ids", pa.list_(pa.string())),
        ("session_id", pa.string()),
        ("repo", pa.string()),
        ("agent", pa.string()),
        ("lang", pa.string()),
        ("split", pa.string()),
        ("source", pa.string()),
        ("regenerated_from", pa.string()),
    ],
    metadata={VERSION_KEY: str(SCHEMA_VERSION).encode()},
)


@dataclass
class Sequence:
    """One row of `SEQUENCES_SCHEMA` (the trainer also holds pieces of one cut to its context)."""

    input_ids: list[int]
    loss_mask: list[int]
    span_starts: list[int]
    span_ends: list[int]
    session_id: str | None = None
    repo: str | None = None
    agent: str = OTHER_AGENT
    lang: str = "en"
    call_ids: list[str] = field(default_factory=list)
    split: str = TRAIN
    sequence_id: str = ""
    source: str = RECORDED
    regenerated_from: str | None = None

    @property
    def supervised(self) -> int:
        return int(np.count_nonzero(np.asarray(self.loss_mask)))

    @property
    def held_out(self) -> bool:
        return self.split == TEST

    @property
    def group(self) -> str:
        """What the report counts as a held-out group: the repository, else the session."""
        return f"repo:{self.repo}" if self.repo else f"session:{self.session_id or self.sequence_id}"

    def row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Sequence:
        given: dict[str, Any] = {k: row[k] for k in SEQUENCES_SCHEMA.names if row.get(k) is not None}
        for k in ("input_ids", "loss_mask", "span_starts", "span_ends", "call_ids"):
            given[k] = list(given.get(k, ()))
        return cls(**given)


def untrainable(row: Mapping[str, Any], trained_tags: frozenset[str] = frozenset()) -> str | None:
    """Why a call record (or published `calls` row, prompt ids rebuilt) is not trained on; None: it is.
    `trained_tags`: tags whose calls are merged all the same (a rehearsal's export measures its build)."""
    if row.get("tag") and row["tag"] not in trained_tags:
        return f"tagged:{row['tag']}"
    if (row.get("outcome") or "ok") != "ok" or (row.get("status_code") or 200) != 200:
        return "not_ok"
    prompt, completion = row.get("prompt_token_ids"), row.get("completion_token_ids")
    if prompt is None or completion is None:
        return "no_ids"
    if not row.get("ids_redacted"):  # a redacted secret's placeholder re-tokenizes to another length
        for got, key in ((prompt, "prompt_tokens"), (completion, "completion_tokens")):
            if row.get(key) is not None and int(row[key]) != len(got):
                return f"stored_ids_disagree_with_{key}"
    if len(prompt) == 0:
        return "empty_prompt"
    if len(completion) == 0:
        return "empty_completion"
    return None


@dataclass
class _Chain:
    ids: np.ndarray
    mask: np.ndarray
    starts: list[int]
    ends: list[int]
    calls: list[str]


class SessionMerge:
    """One session's trainable calls, in the order they were made, merged into sequences (memory: one
    prompt + completion per chain, not one per call)."""

    def __init__(self) -> None:
        self.chains: list[_Chain] = []

    def add(
        self, call_id: str, prompt: Seq[int], completion: Seq[int], supervise: Seq[int] | None = None
    ) -> None:
        p = np.asarray(prompt, dtype=np.int32)
        c = np.asarray(completion, dtype=np.int32)
        m = np.ones(len(c), np.int8) if supervise is None else np.asarray(supervise, dtype=np.int8)
        best: _Chain | None = None
        for chain in self.chains:
            n = len(chain.ids)
            if n <= len(p) and (best is None or n > len(best.ids)) and np.array_equal(p[:n], chain.ids):
                best = chain
        if best is None:
            best = _Chain(np.zeros(0, np.int32), np.zeros(0, np.int8), [], [], [])
            self.chains.append(best)
        gap = np.zeros(len(p) - len(best.ids), np.int8)
        best.mask = np.concatenate([best.mask, gap, m])
        best.ids = np.concatenate([p, c])
        best.starts.append(len(p))
        best.ends.append(len(best.ids))
        best.calls.append(call_id)

    def sequences(
        self,
        session_id: str | None,
        *,
        repo: str | None,
        agent: str,
        lang: str,
        split: str = TRAIN,
        arrays: bool = False,
    ) -> list[Sequence]:
        """The chains as sequences, `<session_id>-s<k>` in the order they were started. `arrays`: ids and
        mask stay int32 / int8 numpy arrays (the export writes them to Arrow without a Python list)."""
        return [
            Sequence(
                input_ids=c.ids if arrays else c.ids.tolist(),  # type: ignore[arg-type]
                loss_mask=c.mask if arrays else c.mask.tolist(),  # type: ignore[arg-type]
                span_starts=c.starts,
                span_ends=c.ends,
                session_id=session_id,
                repo=repo,
                agent=agent,
                lang=lang,
                call_ids=c.calls,
                split=split,
                sequence_id=f"{session_id or c.calls[0]}-s{k:03d}",
            )
            for k, c in enumerate(self.chains)
        ]


def resampled(
    call_id: str,
    of_call: str,
    prompt: Seq[int],
    completion: Seq[int],
    source: Sequence,
    supervise: Seq[int] | None = None,
) -> Sequence:
    """A re-sampled completion of `of_call` (one of `source`'s calls; `prompt` is its prompt), on
    `source`'s side of the split."""
    n = len(prompt)
    mask = [1] * len(completion) if supervise is None else [int(x) for x in supervise]
    return Sequence(
        input_ids=[*map(int, prompt), *map(int, completion)],
        loss_mask=[0] * n + mask,
        span_starts=[n],
        span_ends=[n + len(completion)],
        session_id=source.session_id,
        repo=source.repo,
        agent=source.agent,
        lang=source.lang,
        call_ids=[call_id],
        split=source.split,
        sequence_id=call_id,
        source=REGENERATED,
        regenerated_from=of_call,
    )
