"""No held-out token is trained on, and only held-out calls are judged: the held-out repositories followed
from the export's split (`records.split`, as `factory.publish` applies it) through the trainer's data and
packed steps and the replay's selection. The same check run with a planted change of one side's split key
(the trainer hashing the repository its old way, ignoring the export's split) finds the leak."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from factory.publish.sessions import plan_splits
from records import split
from tests.trainer.dflash.tiny import tiny_target, write_calls
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.data.records import load_examples, read_rows
from trainer.packed import plan_steps
from trainer.replay.calls import load_calls

SESSIONS, REPOS = 12, 5


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """A dataset folder as the export writes its `calls` config (train-* / test-* files), and the call ids
    of its test split. Sessions are spread over fewer repositories, so a repository has several."""
    tmp = tmp_path_factory.mktemp("export")
    rows = pq.read_table(
        write_calls(tiny_target(layers=4), tmp / "all.parquet", sessions=SESSIONS, calls=2)
    ).to_pylist()
    for r in rows:
        r["repo"] = f"Org/Repo{int(r['session_id'][1:]) % REPOS}"
    sessions = [{"session_id": f"s{i}", "repo": f"Org/Repo{i % REPOS}"} for i in range(SESSIONS)]
    plan = plan_splits(sessions, {s["session_id"]: 2 for s in sessions}, held_out=0.3)
    assert plan.by == "repository"
    folder = tmp / "dataset" / "data" / "calls"
    folder.mkdir(parents=True)
    for side in (split.TRAIN, split.TEST):
        mine = [r for r in rows if plan.side(r["session_id"]) == side]
        pq.write_table(pa.Table.from_pylist(mine), folder / f"{side}-00000-of-00001.parquet")
    test_ids = {r["call_id"] for r in rows if plan.side(r["session_id"]) == split.TEST}
    assert 0 < len(test_ids) < len(rows)
    return tmp / "dataset", test_ids


def leaks(dataset: Path, test_ids: set[str]) -> dict[str, Any]:
    """What crossed: held-out calls in the trainer's training sequences or packed steps, training calls in
    the trainer's eval side or the replay's selection."""
    target = tiny_target(layers=4)
    examples, _ = load_examples(target, read_rows(dataset))
    res = data_build.build_from_examples(examples, data_build.Report(), max_len=10_000, eval_fraction=0.3)
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
    monkeypatch.setattr(data_build, "_hints", lambda examples: {})  # the export's split ignored, and
    monkeypatch.setattr(data_build, "_repo", lambda s: f"repo:{s.repo}")  # the repository hashed another way
    found = leaks(dataset, test_ids)
    assert found["trained"], found  # held-out calls trained on: the check sees it
