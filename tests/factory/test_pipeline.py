"""The harvest orchestration end to end without Docker: bundled sample → real proxy (subprocess) in
front of the scripted upstream → translation of a missing issue (tagged, so kept out of the data) →
plan → scripted sessions making real calls through the proxy → roll → export → `datasets`."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from sqlalchemy import select

from factory.db import Issue, Repo, Translation, connect, default_url, session_factory
from factory.harvest import HarvestOptions, run_harvest
from factory.ingest import sample
from records.io import read_table

ROOT = Path(__file__).resolve().parents[2]


def test_harvest_with_scripted_sessions(tmp_path, scripted_upstream, monkeypatch):
    data = tmp_path / "data"
    sessions = session_factory(connect(default_url(data)))
    sample.install(sessions, data / "sample-repos")
    with sessions.begin() as s:  # one issue without a Korean version: the harvest must translate it
        repo = s.scalar(select(Repo).where(Repo.name == "dflash-sample/textkit"))
        base = s.scalar(select(Issue.base_commit).where(Issue.repo_id == repo.id))
        s.add(
            Issue(
                repo_id=repo.id,
                number=99,
                title="truncate() cuts words",
                body="When I call `truncate(text, 10)` "
                "the last word is cut in the middle and the ellipsis is placed after it.",
                created_at="2024-05-01T00:00:00Z",
                updated_at="2024-05-01T00:00:00Z",
                base_commit=base,
            )
        )

    opts = HarvestOptions(
        data_dir=data, target_url=scripted_upstream, runner="fake", limit=6, concurrency=2, held_out=0.0
    )
    with (tmp_path / "console.txt").open("w") as fh:
        summary = run_harvest(opts, Console(file=fh, width=120))

    assert summary["run"]["done"] == 6
    assert summary["translated"] == {"ok": 0, "rejected": 1}  # the scripted model answers in English
    with sessions() as s:
        t = s.scalar(select(Translation).where(Translation.status == "rejected"))
        assert t is not None
        assert t.reason
        assert t.attempts >= 1
    exp = summary["export"]
    cells = exp["by_agent_lang"]
    assert {k.split("/")[0] for k in cells} == {"claude-code", "codex", "opencode"}
    assert {k.split("/")[1] for k in cells} == {"en", "ko"}
    assert exp["calls"] == 12
    assert exp["sessions"] == 6
    stats = json.loads((data / "dataset" / "stats.json").read_text())
    assert stats["translation_calls_skipped"] >= 1

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets

    # Every split: with too few repositories the export holds out whole sessions instead.
    ds = datasets.load_dataset(str(data / "dataset"), "calls", cache_dir=str(tmp_path / "hf"))
    calls = [row for split in ds.values() for row in split]
    assert len(calls) == 12
    assert all(r["outcome"] == "ok" and r["status_code"] == 200 for r in calls)
    assert {r["lang"] for r in calls} == {"en", "ko"}
    # the Korean task reached the model (request bodies are stored as deltas; records.io gives them whole)
    assert any("이슈" in r["request_json"] for r in read_table(data / "dataset").to_pylist())
    assert "harvest done" in (tmp_path / "console.txt").read_text()
