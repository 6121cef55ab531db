"""An exported dataset's `sequences` config as training sequences: the trainer trains on what is published.

Found at DIR/data/sequences/ (an export folder), DIR/dataset/data/sequences/ (a data folder holding its
export), or, for a Hub dataset id, in a snapshot `huggingface_hub` downloads when the Hub is reachable. Rows
are taken as published — the merge and the split are the export's (records.sequences, records.split): a
`test` row is the trainer's eval side. What the trainer adds is its own policy, counted per reason:

- a row with an id outside its target's vocabulary is left out (a dataset recorded from another tokenizer);
- an empty thinking block opening a span (`<think>\\n\\n</think>\\n\\n`, template scaffolding) is not
  supervised, as for call records (trainer/data/records.py);
- `model_filter` keeps rows whose calls the `calls` config names with that `model`;
- `regenerated: false` leaves out the `regenerated` rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from huggingface_hub import snapshot_download

from lm.model import Target
from records.sequences import REGENERATED, Sequence
from records.split import TEST, TRAIN
from records.storage import is_url
from trainer.data.records import Report, empty_think_prefix
from trainer.errors import TrainerError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def sequences_dir(source: str | Path) -> Path | None:
    """The `sequences` config folder of the export at `source`, or None (call records, a URL)."""
    if is_url(source):
        return None
    for sub in ("data/sequences", "dataset/data/sequences"):
        d = Path(source) / sub
        if d.is_dir() and any(_files(d)):
            return d
    return None


def hub_snapshot(repo_id: str) -> Path:
    """A local snapshot of the Hub dataset `repo_id` (huggingface_hub's cache; only new files fetched)."""
    try:
        return Path(snapshot_download(repo_id, repo_type="dataset"))
    except Exception as e:  # offline, unknown id, gated: all mean the same to the user
        raise TrainerError(
            f"data={repo_id!r}: no such folder here, and the Hub did not serve it as a dataset "
            f"({type(e).__name__}: {e})"
        ) from e


def published_call_tokens(seq: Sequence) -> int:
    """Target tokens were each of the sequence's calls run alone (its prompt + completion = its span end)."""
    return sum(seq.span_ends)


def published_sequences(
    target: Target, folder: Path, *, model: str | None = None, regenerated: bool = True
) -> tuple[list[Sequence], Report, dict[str, str]]:
    """The kept rows, what was left out and why, and how the export split them."""
    _refuse_rehearsal(folder)
    report = Report()
    models = _call_models(folder.parent / "calls") if model is not None else {}
    out: list[Sequence] = []
    for row in _rows(folder):
        report.rows += 1
        seq = Sequence.from_row(row)
        why = _excluded(target, seq, model, models, regenerated)
        if why:
            report.exclude(why)
            continue
        report.kept += 1
        report.kept_by_source[seq.source] += 1
        out.append(seq)
    return out, report, _how(folder)


def _excluded(
    target: Target, seq: Sequence, model: str | None, models: dict[str, str], regenerated: bool
) -> str | None:
    if seq.split not in (TRAIN, TEST):
        return f"unknown_split:{seq.split}"
    if seq.source == REGENERATED and not regenerated:
        return "regenerated_not_asked"
    if model is not None and any(models.get(c) != model for c in seq.call_ids if c in models):
        return "other_model"
    vocab = target.vocab_size
    if any(not 0 <= t < vocab for t in seq.input_ids):
        return "ids_out_of_vocab"
    for start, end in zip(seq.span_starts, seq.span_ends, strict=True):
        for i in range(start, start + empty_think_prefix(target, seq.input_ids[start:end])):
            seq.loss_mask[i] = 0
    return None if seq.supervised >= 2 else "nothing_to_supervise"


def _files(folder: Path) -> Iterator[Path]:
    return (f for f in sorted(folder.glob("*.parquet")) if not f.name.startswith((".", "_")))


def _rows(folder: Path) -> Iterator[dict[str, Any]]:
    for f in _files(folder):
        for batch in pq.ParquetFile(f).iter_batches(batch_size=256):
            yield from batch.to_pylist()


def _call_models(calls: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in _files(calls) if calls.is_dir() else ():
        t = pq.read_table(f, columns=["call_id", "model"])
        out.update(zip(t.column("call_id").to_pylist(), t.column("model").to_pylist(), strict=True))
    return out


def _refuse_rehearsal(folder: Path) -> None:
    """A rehearsal's export holds the scripted brain's traffic: training on it would teach a drafter a script."""
    stats = folder.parent.parent / "stats.json"
    if stats.is_file() and json.loads(stats.read_text()).get("settings", {}).get("rehearsal"):
        raise TrainerError(
            f"data={folder.parent.parent}: a rehearsal's dataset (answered by the scripted brain, "
            "`make rehearse`), not training data"
        )


def _how(folder: Path) -> dict[str, str]:
    """The export's split, as its stats.json records it."""
    stats = folder.parent.parent / "stats.json"
    split = json.loads(stats.read_text()).get("split", {}) if stats.is_file() else {}
    out = {"by": f"dataset split ({split.get('by') or 'as published'})"}
    if split.get("note"):
        out["note"] = split["note"]
    return out
