"""No held-out token is trained on, and only held-out calls are judged: the held-out repositories followed
from a real export (`records.split`, as `factory.publish` applies it) through the trainer's reading of the
published `sequences` config, its packed steps and the replay's selection of the published `calls`. The
same check run with a planted change (the trainer hashing the repository its own way, ignoring the
published split) finds the leak."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from factory.publish.export import export
from records import split
from records.sequences import Sequence
from tests.harvested import harvested, queue
from tests.trainer.dflash.tiny import tiny_target
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.packed import plan_steps
from trainer.replay.calls import load_calls

SESSIONS, REPOS = 12, 5  # the first 12 of the sessions planned get calls


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """A real export (sessions run by the fake runner against a SQLite queue, their calls in the proxy's
    parts with the tiny target's ids) and the call ids of its test split. The sessions' repositories come
    from the queue: several sessions per repository."""
    tmp = tmp_path_factory.mktemp("export")
    rows = harvested(tmp, sessions=SESSIONS, repos=REPOS)
    export(queue(tmp), tmp / "data", tmp / "data" / "dataset", held_out=0.3)
    test_files = (tmp / "data" / "dataset" / "data" / "calls").glob("test-*.parquet")
    test_ids = {c for f in test_files for c in pq.read_table(f, columns=["call_id"]).column(0).to_pylist()}
    assert 0 < len(test_ids) < len(rows)
    return tmp / "data" / "dataset", test_ids


def leaks(dataset: Path, test_ids: set[str]) -> dict[str, Any]:
    """What crossed: held-out calls in the trainer's training sequences or packed steps, training calls in
    the trainer's eval side or the replay's selection."""
    res = data_build.build(tiny_target(layers=4), dataset, max_len=10_000, eval_fraction=0.3)
    assert res.report["records"]["kept"], res.report
    assert res.report["split"]["by"].startswith("dataset split"), res.report
    cfg = TrainConfig(target="tiny", max_len=10_000)
    stepped = {
        c for units in plan_steps(cfg, res.train) for u in units for s in u.segments for c in s.seq.call_ids
    }
    replayed, _ = load_calls(dataset, n=10_000, seed=0, cap=64)
    trained = {c for s in res.train for c in s.call_ids}
    return {
        "trained": trained & test_ids,
        "stepped": stepped & test_ids,
        "eval_not_held_out": {c for s in res.eval for c in s.call_ids} - test_ids,
        "replayed_not_held_out": {c.call_id for c in replayed} - test_ids,
        "held_out_not_replayed": test_ids - {c.call_id for c in replayed},
    }


def test_nothing_held_out_is_trained_on_and_only_held_out_calls_are_judged(
    exported: tuple[Path, set[str]],
) -> None:
    dataset, test_ids = exported
    assert all(not v for v in leaks(dataset, test_ids).values())


def test_a_planted_change_of_the_trainers_split_key_is_caught(
    exported: tuple[Path, set[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset, test_ids = exported
    # the published split ignored: the trainer hashing the repository its own way
    monkeypatch.setattr(Sequence, "held_out", property(lambda s: split.fraction(f"repo:{s.repo}") < 0.3))
    found = leaks(dataset, test_ids)
    assert found["trained"], found  # held-out calls trained on: the check sees it
