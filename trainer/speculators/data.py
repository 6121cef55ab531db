"""`python -m trainer export-speculators RUN OUT`: a run's built sequences as a speculators data folder.

speculators' `scripts/train.py --data-path OUT` reads a `datasets` folder (`load_from_disk`) with
`input_ids`, `loss_mask` and `seq_len` per row, and splits it by row order: the first
`int(len · --train-data-ratio)` rows train, the rest validate. So the run's train sequences are written
first and its held-out ones after them, and the ratio that reproduces this project's split exactly is
written to `OUT/dflash_factory.json` and printed (with nothing held out, a copy of the last training
sequence is the validation split: speculators refuses an empty one). Sequences are written whole (this project never cuts
a supervised span): pass `--total-seq-len` at least `max_seq_len` from that file, or speculators'
preprocessing truncates them silently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from datasets import Dataset, Features, Sequence, Value

FEATURES = Features(
    {"input_ids": Sequence(Value("int64")), "loss_mask": Sequence(Value("int64")), "seq_len": Value("int64")}
)


def _rows(path: Path) -> list[dict[str, Any]]:
    table = pq.read_table(str(path), columns=["input_ids", "loss_mask"])
    return [
        {
            "input_ids": list(r["input_ids"]),
            "loss_mask": [int(m) for m in r["loss_mask"]],
            "seq_len": len(r["input_ids"]),
        }
        for r in table.to_pylist()
    ]


def train_ratio(n_train: int, n_total: int) -> float:
    """A `--train-data-ratio` r with int(n_total · r) == n_train (speculators' own split expression).

    speculators always validates and refuses r = 1 (its validation split `r − 1` must not be 0), so
    there must be at least one row after the training rows (``export`` sees to it)."""
    if not 0 < n_train < n_total:
        raise ValueError(f"{n_train} training rows of {n_total}: speculators needs both splits non-empty")
    r = (n_train + 0.5) / n_total
    assert int(n_total * r) == n_train
    return r


def export(run_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    run, out = Path(run_dir).resolve(), Path(out_dir)
    data = run / "data"
    if not (data / "train.parquet").exists():
        raise SystemExit(
            f"no built data in {run} (expected {data / 'train.parquet'}): train or build it first"
        )
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} exists and is not empty: choose a new directory")
    train = _rows(data / "train.parquet")
    held = _rows(data / "eval.parquet") if (data / "eval.parquet").exists() else []
    # Nothing held out (eval_fraction 0): speculators refuses an empty validation split, so a copy of
    # the last training sequence validates, and every training sequence is still trained on.
    validation_copy = not held and bool(train)
    rows = train + (held or train[-1:])
    bad = [i for i, r in enumerate(rows) if len(r["loss_mask"]) != r["seq_len"] or not any(r["loss_mask"])]
    if bad:
        raise SystemExit(
            f"{len(bad)} sequences have a mask of another length or nothing supervised (rows {bad[:5]})"
        )
    Dataset.from_list(rows, features=FEATURES).save_to_disk(str(out))
    meta = {
        "source_run": str(run),
        "rows": len(rows),
        "train_rows": len(train),
        "eval_rows": len(held),
        "validation_is_a_training_copy": validation_copy,
        "train_data_ratio": train_ratio(len(train), len(rows)),
        "max_seq_len": max((r["seq_len"] for r in rows), default=0),
        "supervised_tokens": sum(sum(r["loss_mask"]) for r in rows),
    }
    (out / "dflash_factory.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta
