"""The trainer trains on what is published: an export's `sequences` config (merged by the rule the trainer
uses on call records), its split, and its `regenerated` rows, so a copy of the dataset folder alone trains
on what `make train` does. The Hub is faked (it cannot be reached here): `snapshot_download` returns a
local copy, as it would return its cache folder."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from factory.cli import app as factory_app
from factory.publish.export import export
from records.io import write_part
from records.schema import CallRecord
from records.sequences import REGENERATED
from tests.harvested import harvested, queue
from tests.trainer.dflash.tiny import tiny_target
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.data import published
from trainer.data.records import read_rows
from trainer.rundir import resolve_data


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DATA_DIR after `make harvest` and a regeneration: re-samples of one training call, of one held-out
    call, and one whose prompt is not the published one; then exported again as `make regenerate` does."""
    tmp = tmp_path_factory.mktemp("published")
    harvested(tmp, sessions=8, repos=4)
    export(queue(tmp), tmp / "data", tmp / "data" / "dataset", held_out=0.3)
    rows = list(read_rows(tmp / "data"))  # the published calls, as regeneration reads them
    train = next(r for r in rows if r["split_hint"] == "train")
    test = next(r for r in rows if r["split_hint"] == "test")
    t = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)

    def resample(src: dict, k: int, prompt: list[int]) -> dict:
        return CallRecord(
            call_id=f"{src['call_id']}~r{k}",
            session_id=src["session_id"],
            agent=src["agent"],
            api="openai_completions",
            method="POST",
            path="/v1/completions",
            model="tiny",
            stream=False,
            status_code=200,
            outcome="ok",
            request_json="{}",
            response_json="{}",
            started_at=t,
            finished_at=t,
            prompt_tokens=len(prompt),
            completion_tokens=3,
            prompt_token_ids=prompt,
            completion_token_ids=[5, 6, 7],
            token_ids_source="upstream",
            regenerated_from=src["call_id"],
        ).as_row()

    regen = [resample(train, 0, train["prompt_token_ids"]), resample(test, 0, test["prompt_token_ids"])]
    regen.append(resample(train, 1, [*train["prompt_token_ids"][:-1], 3]))
    write_part(regen, tmp / "data" / "regenerated", "part-0.parquet")
    db = f"sqlite:///{tmp / 'q.db'}"
    result = CliRunner().invoke(factory_app, ["export", "--data-dir", str(tmp / "data"), "--db", db])
    assert result.exit_code == 0, result.output
    return tmp / "data"


def test_a_copy_of_the_dataset_trains_on_what_the_data_folder_does(data: Path, tmp_path: Path) -> None:
    target = tiny_target(layers=4)
    copy = tmp_path / "hub-copy"
    shutil.copytree(data / "dataset", copy)
    here = data_build.build(target, data, eval_fraction=0.3, max_len=10_000)
    there = data_build.build(target, copy, eval_fraction=0.3, max_len=10_000)
    assert [s.row() for s in here.train] == [s.row() for s in there.train]
    assert [s.row() for s in here.eval] == [s.row() for s in there.eval]
    regen = [s for s in there.train if s.source == REGENERATED]
    assert [s.sequence_id for s in regen] == [next(iter(regen)).call_ids[0]]  # the one publishable re-sample
    assert regen[0].loss_mask[-3:] == [1, 1, 1]
    assert not any(s.source == REGENERATED for s in there.eval)
    assert there.report["split"]["train"]["sources"] == {"recorded": len(there.train) - 1, "regenerated": 1}


def test_the_export_left_out_what_must_not_be_published(data: Path) -> None:
    stats = (data / "dataset" / "stats.json").read_text()
    assert '"source_call_held_out": 1' in stats
    assert '"prompt_differs_from_published": 1' in stats
    assert '"held_out": 0.3' in stats  # the re-export kept the first export's split


def test_the_published_sequences_are_the_trainers_own_merge_of_the_records(data: Path) -> None:
    """One merge: the trainer's sequences from the proxy's call records equal the published ones."""
    target = tiny_target(layers=4)
    from_records = data_build.build(
        target, data / "calls", eval_fraction=0.3, max_len=10_000, regenerated=False
    )
    from_export = data_build.build(
        target, data / "dataset", eval_fraction=0.3, max_len=10_000, regenerated=False
    )

    def key(s):  # type: ignore[no-untyped-def]
        return (s.input_ids, s.loss_mask, s.span_starts, s.span_ends, len(s.call_ids))

    mine = sorted(key(s) for s in from_records.train + from_records.eval)
    theirs = sorted(key(s) for s in from_export.train + from_export.eval)
    assert mine == theirs
    assert from_export.report["merge"]["sequences"] < from_export.report["calls"]  # sessions did merge


def test_a_hub_id_is_downloaded_and_read_as_the_folder(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(published, "snapshot_download", lambda repo_id, repo_type: str(data / "dataset"))
    assert resolve_data(TrainConfig(target="tiny", data="org/agent-traffic")) == data / "dataset"

    def offline(repo_id: str, repo_type: str) -> str:
        raise OSError("offline")

    monkeypatch.setattr(published, "snapshot_download", offline)
    with pytest.raises(published.TrainerError, match=r"org/agent-traffic.*did not serve it"):
        resolve_data(TrainConfig(target="tiny", data="org/agent-traffic"))


def test_rows_outside_the_vocabulary_are_left_out_and_counted(data: Path, tmp_path: Path) -> None:
    copy = tmp_path / "other"
    shutil.copytree(data / "dataset", copy)
    f = next((copy / "data" / "sequences").glob("train-*.parquet"))
    t = pq.read_table(f).to_pylist()
    t[0]["input_ids"] = [10**6] * len(t[0]["input_ids"])
    pq.write_table(pq.read_table(f).from_pylist(t, schema=pq.read_schema(f)), f)
    res = data_build.build(tiny_target(layers=4), copy, eval_fraction=0.3, max_len=10_000)
    assert res.report["records"]["excluded"] == {"ids_out_of_vocab": 1}


def test_re_samples_newer_than_the_export_are_said_to_be_unpublished(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    resolve_data(TrainConfig(target="tiny", data=str(copy / "dataset")))
    assert "newer than the export" not in capsys.readouterr().out
    part = next((copy / "regenerated").glob("*.parquet"))
    later = (copy / "dataset" / "stats.json").stat().st_mtime + 60
    os.utime(part, (later, later))
    resolve_data(TrainConfig(target="tiny", data=str(copy / "dataset")))
    assert "1 part(s) newer than the export" in capsys.readouterr().out
