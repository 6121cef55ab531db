"""Export: the Hub layout loads with `datasets`, splits by repository, drops duplicates, stale
attempts and translation calls, and a planted secret never reaches the published files."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from sqlalchemy import select

from factory.db import Session, connect, session_factory
from factory.publish.export import export
from factory.publish.push import push
from factory.run.fake_runner import FakeSessionRunner
from factory.run.plan import PlanConfig, plan
from factory.run.runner import RunConfig, Runner
from records import SCHEMA as PROXY_SCHEMA
from records.io import read_table

from .helpers import CHAT_CALL, seed

SECRET_KEY = "sk-proj-PLANTEDsecretVALUE0123456789abcd"
SECRET_PK = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----"
SECRET_URL = "postgres://admin:Tr0ub4dor3xyz@db.internal:5432/prod"


def call(session_id: str, i: int, **kw) -> dict:
    t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i)
    base = {
        **CHAT_CALL,
        "call_id": f"c{session_id}{i}",
        "session_id": session_id,
        "request_json": json.dumps({"messages": [{"role": "user", "content": f"step {i} of {session_id}"}]}),
        "response_json": json.dumps({"choices": [{"message": {"content": f"answer {i}"}}]}),
        "started_at": t,
        "finished_at": t,
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "prompt_token_ids": [1, 2, 3],
        "completion_token_ids": [4, 5],
        "translated": False,
        "upstream": "http://target",
        "proxy_id": "p1",
    }
    base.update(kw)
    return base


@pytest.fixture
def finished(tmp_path, sqlite_url):
    sessions = session_factory(connect(sqlite_url))
    seed(sessions, tmp_path / "repo", repos=4, issues=2)
    plan(sessions, PlanConfig(seed=0))
    cfg = RunConfig(proxy_url="http://x", data_dir=tmp_path / "data", concurrency=2, poll_s=0.05)
    Runner(sessions, FakeSessionRunner(), cfg).run()
    with sessions() as s:
        done = list(s.scalars(select(Session)))
    rows = []
    for n, sess in enumerate(done):
        rows += [call(sess.proxy_session_id, 2 * n), call(sess.proxy_session_id, 2 * n + 1)]
    first = done[0].proxy_session_id
    rows.append(call(first, 1000, call_id="dup"))  # exact duplicate of call(first, 0) except id/time
    rows[-1]["request_json"], rows[-1]["response_json"] = rows[0]["request_json"], rows[0]["response_json"]
    rows.append(call(first.replace("-a1", "-a0"), 2000))  # a stale attempt
    rows.append(call("translate", 3000, tag="translation"))
    planted = call(
        done[1].proxy_session_id,
        4000,
        request_json=json.dumps(
            {"messages": [{"role": "user", "content": f"use key {SECRET_KEY} and\n{SECRET_PK}"}]}
        ),
        response_json=json.dumps(
            {"choices": [{"message": {"content": f"connecting to {SECRET_URL} as ops@corp.example.com"}}]}
        ),
    )
    rows.append(planted)
    calls_dir = tmp_path / "data" / "calls"
    calls_dir.mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(rows[: len(rows) // 2], schema=PROXY_SCHEMA), calls_dir / "part-a.parquet"
    )
    pq.write_table(
        pa.Table.from_pylist(rows[len(rows) // 2 :], schema=PROXY_SCHEMA), calls_dir / "part-b.parquet"
    )
    (calls_dir / ".part-c.parquet.tmp").write_bytes(b"half written")  # hidden: ignored
    return sessions, tmp_path, done


def all_values(folder: Path) -> str:
    parts = []
    for f in sorted(folder.rglob("*.parquet")):
        parts.append(json.dumps(pq.read_table(f).to_pylist(), default=str, ensure_ascii=False))
    for f in folder.rglob("*"):
        if f.suffix in (".md", ".json"):
            parts.append(f.read_text())
    return "\n".join(parts)


def test_export_layout_loads_and_is_clean(finished, monkeypatch):
    sessions, tmp_path, done = finished
    out = tmp_path / "data" / "dataset"
    stats = export(sessions, tmp_path / "data", out, held_out=0.5, rows_per_shard=5)
    assert stats.sessions == len(done) == 48
    assert stats.calls == 2 * len(done) + 1
    assert stats.duplicates_dropped == 1
    assert stats.stale_attempt_calls_skipped == 1
    assert stats.translation_calls_skipped == 1
    assert stats.token_ids_dropped == 1
    assert stats.secrets == {"openai_key": 1, "private_key": 1, "url_password": 1, "email": 1}

    # Hub layout: data/<config>/<split>-xxxxx-of-xxxxx.parquet and the card's YAML configs
    files = sorted(p.relative_to(out).as_posix() for p in (out / "data").rglob("*.parquet"))
    assert files
    assert all(
        f.split("/")[2].split("-")[0] in ("train", "test") and f.endswith(".parquet") and "-of-" in f
        for f in files
    )
    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert {c["config_name"] for c in meta["configs"]} == {"calls", "trajectories", "sequences", "sessions"}
    assert "openai_key: 1" in card
    assert f"{stats.calls:,} model calls" in card
    assert (out / "plots" / "calls_by_agent_lang.png").stat().st_size > 1000

    # the planted secret is nowhere in what would be published
    everything = all_values(out)
    for secret in (
        SECRET_KEY,
        "Tr0ub4dor3xyz",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
        "ops@corp.example.com",
    ):
        assert secret not in everything
    assert "<REDACTED:openai_key>" in everything

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    calls = datasets.load_dataset(str(out), "calls", cache_dir=str(tmp_path / "hfcache"))
    sess = datasets.load_dataset(str(out), "sessions", cache_dir=str(tmp_path / "hfcache"))
    assert set(calls) == {"train", "test"} == set(sess)
    assert sum(len(calls[s]) for s in calls) == stats.calls
    assert sum(len(sess[s]) for s in sess) == 48
    # one repository never straddles the splits
    train_repos, test_repos = set(calls["train"]["repo"]), set(calls["test"]["repo"])
    assert train_repos
    assert test_repos
    assert not train_repos & test_repos
    rows = read_table(out).to_pylist()  # request_json and prompt_token_ids whole again
    scrubbed = [r for r in rows if "REDACTED" in r["request_json"]]
    assert len(scrubbed) == 1
    # no tokenizer was given, so the ids of the call with a secret cannot be searched: they are dropped
    assert scrubbed[0]["prompt_token_ids"] is None
    assert scrubbed[0]["ids_redacted"] is None
    clean = [r for r in rows if "REDACTED" not in r["request_json"]]
    assert all(r["prompt_token_ids"] == [1, 2, 3] and r["ids_exact"] for r in clean)
    assert stats.exact_ids_fraction == (stats.calls - 1) / stats.calls
    assert {r["lang"] for s in sess for r in sess[s]} == {"en", "ko"}
    assert {r["agent"] for s in sess for r in sess[s]} == {"claude-code", "codex", "opencode"}
    assert all(r["n_calls"] >= 2 and r["outcome"] == "succeeded" for s in sess for r in sess[s])
    ko_task = next(r["task"] for s in sess for r in sess[s] if r["lang"] == "ko")
    assert "이슈" in ko_task
    with sessions() as s:  # reconciled call counts
        assert all((x.call_count or 0) >= 2 for x in s.scalars(select(Session)))


def test_push_dry_run_and_upload_path(finished, tmp_path):
    sessions, tmp_path, _ = finished
    out = tmp_path / "ds"
    export(sessions, tmp_path / "data", out)
    listed = push(out, "org/name", dry_run=True)
    assert ("README.md", (out / "README.md").stat().st_size) in listed
    assert any(p.startswith("data/calls/") for p, _ in listed)

    class FakeApi:
        def __init__(self):
            self.calls = []

        def create_repo(self, *a, **kw):
            self.calls.append(("create_repo", a, kw))

        def upload_large_folder(self, **kw):
            self.calls.append(("upload_large_folder", (), kw))

    api = FakeApi()
    push(out, "org/name", api=api)
    assert api.calls[0] == (
        "create_repo",
        ("org/name",),
        {"repo_type": "dataset", "exist_ok": True, "private": False},
    )
    assert api.calls[1][2] == {"repo_id": "org/name", "folder_path": str(out), "repo_type": "dataset"}
    assert (out / "README.md").exists()
