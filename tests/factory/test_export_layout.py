"""The exported layout at agent scale: prefix-encoded prompt ids give back every id (through records.io, through
`datasets` with the card's own snippet, shard by shard), shards are cut by bytes, the same input exports to the
same bytes, an interrupted export reruns, and the held-out split is never empty."""

from __future__ import annotations

import datetime as dt
import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from factory.publish.export import export
from records.io import read_table

from .test_export_ids import finished_sessions, write_parts


def session_calls(session: str, turns: int, seed: int, start: int = 0) -> list[dict]:
    """An agent session: every call resends the history and adds a turn (prompt ids grow)."""
    rng = np.random.default_rng(seed)
    history = rng.integers(0, 150_000, 400).tolist()  # system prompt and tools
    out = []
    for t in range(turns):
        history += rng.integers(0, 150_000, int(rng.integers(50, 400))).tolist()
        stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=start + 10 * t)
        out.append({
            "call_id": f"{session}-{t:03d}", "session_id": session, "agent": "opencode",
            "user_agent": "opencode/1.18.33 ai-sdk/provider-utils/4.0.23", "api": "openai_chat",
            "method": "POST", "path": "/v1/chat/completions", "model": "target", "stream": True,
            "status_code": 200, "outcome": "ok",
            "request_json": json.dumps(
                    {"messages": [f"{session} turn {i}: " + "edit the file " * 30 for i in range(t + 1)], "tools": ["bash"] * 40}
                ),
            "response_json": json.dumps({"choices": [{"message": {"content": f"reply {t}"}}]}),
            "started_at": stamp, "first_byte_at": stamp, "finished_at": stamp,
            "prompt_token_ids": list(history), "completion_token_ids": rng.integers(0, 150_000, 20).tolist(),
            "prompt_tokens": len(history), "completion_tokens": 20, "token_ids_source": "upstream",
        })  # fmt: skip
        history += out[-1]["completion_token_ids"]
    return out


def interleave(*sessions: list[dict]) -> list[dict]:
    """Calls of concurrent sessions as the proxy's parts hold them: interleaved."""
    out: list[dict] = []
    for i in range(max(len(s) for s in sessions)):
        out += [s[i] for s in sessions if i < len(s)]
    return out


@pytest.fixture
def agent_traffic(tmp_path):
    sessions, done = finished_sessions(tmp_path, repos=2)
    rows = interleave(*(session_calls(s.proxy_session_id, 30, n) for n, s in enumerate(done[:4])))
    write_parts(tmp_path, rows)
    return sessions, rows


@pytest.mark.slow
def test_prefix_encoded_ids_come_back_whole_and_take_a_fraction_of_the_space(
    tmp_path, agent_traffic, monkeypatch
):
    sessions, rows = agent_traffic
    out = tmp_path / "ds"
    stats = export(sessions, tmp_path / "data", out)
    assert stats.calls == len(rows) == 120
    got = {r["call_id"]: r for r in read_table(out).to_pylist()}
    assert all(got[r["call_id"]]["prompt_token_ids"] == r["prompt_token_ids"] for r in rows)
    assert sorted(
        r["turn_index"] for r in got.values() if r["call_id"].startswith(rows[0]["session_id"])
    ) == list(range(30))
    stored = pq.read_table(sorted((out / "data" / "calls").glob("*.parquet"))[0])
    suffix = sum(len(x) for x in stored.column("prompt_ids_suffix").to_pylist())
    full = sum(
        len(r["prompt_token_ids"]) for r in rows if r["call_id"] in stored.column("call_id").to_pylist()
    )
    assert suffix < 0.15 * full  # what each call adds, not the whole history again
    assert stored.column("delta_ref").null_count < 10
    delta = sum(len(x) for x in stored.column("request_json_delta").to_pylist())
    assert delta < 0.15 * sum(
        len(r["request_json"]) for r in rows if r["call_id"] in stored.column("call_id").to_pylist()
    )

    # `datasets` loads the layout, and the card's snippet rebuilds the ids from it
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    calls = datasets.load_dataset(str(out), "calls", cache_dir=str(tmp_path / "hf"))
    card = (out / "README.md").read_text()
    snippet = re.search(r"```python\n(from collections import OrderedDict.*?)```", card, re.S).group(1)
    split = next(iter(calls))
    scope: dict = {"calls": calls, "split": split}
    exec(snippet.replace('calls["train"]', "calls[split]"), scope)
    assert scope["full"] == [
        (got[c]["prompt_token_ids"], got[c]["request_json"]) for c in calls[split]["call_id"]
    ]
    assert all(got[r["call_id"]]["request_json"] == r["request_json"] for r in rows)


def test_the_delta_window_is_written_in_each_file_and_readers_use_it(tmp_path, agent_traffic):
    """`delta_window`: how far back a reference may reach. It is written in each file's metadata and
    readers (records.io, the card's snippet) take it from there; the interleaving it must cover is
    measured in benchmarks/export_scale.py --concurrency."""
    sessions, rows = agent_traffic
    out = tmp_path / "ds"
    export(sessions, tmp_path / "data", out, delta_window=2)
    files = sorted((out / "data" / "calls").glob("*.parquet"))
    assert {pq.read_schema(f).metadata[b"dflash.delta_window"] for f in files} == {b"2"}
    got = {r["call_id"]: r for r in read_table(out).to_pylist()}  # decoded with the file's own window
    assert all(got[r["call_id"]]["prompt_token_ids"] == r["prompt_token_ids"] for r in rows)
    assert "within the last 2 rows" in (out / "README.md").read_text()


def test_shards_are_cut_by_bytes_and_each_decodes_alone(tmp_path, agent_traffic):
    sessions, rows = agent_traffic
    out = tmp_path / "ds"
    lines: list[str] = []
    stats = export(sessions, tmp_path / "data", out, shard_bytes=60_000, held_out=0.0, progress=lines.append)
    assert lines[0].startswith("export: 120 calls in 1 parts")
    assert lines[-1] == "export: 120 calls and 12 sessions written; exact ids kept on 100.0%"
    shards = sorted((out / "data" / "calls").glob("*.parquet"))
    assert len(shards) >= 3
    assert [p.name for p in shards] == [
        f"train-{i:05d}-of-{len(shards):05d}.parquet" for i in range(len(shards))
    ]
    want = {r["call_id"]: r["prompt_token_ids"] for r in rows}
    for shard in shards:  # a reference never crosses a shard
        assert all(want[r["call_id"]] == r["prompt_token_ids"] for r in read_table(shard).to_pylist())
    assert sum(b for f, b in stats.files if "/calls/" in f) == sum(p.stat().st_size for p in shards)


def test_the_same_input_exports_to_the_same_bytes_and_an_interrupted_export_reruns(tmp_path, agent_traffic):
    sessions, _ = agent_traffic
    out = tmp_path / "ds"

    def snapshot() -> dict[str, bytes]:
        return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    export(sessions, tmp_path / "data", out)
    first = snapshot()
    leftover = tmp_path / ".ds.tmp"  # what a killed export leaves behind
    (leftover / "data" / "calls").mkdir(parents=True)
    (leftover / "data" / "calls" / ".train-00000.tmp").write_bytes(b"half a shard")
    export(sessions, tmp_path / "data", out)
    assert snapshot() == first
    assert not leftover.exists()


def test_with_one_repository_whole_sessions_are_held_out_and_the_card_says_so(tmp_path):
    sessions, done = finished_sessions(tmp_path, repos=1)
    write_parts(tmp_path, interleave(*(session_calls(s.proxy_session_id, 3, n) for n, s in enumerate(done))))
    stats = export(sessions, tmp_path / "data", tmp_path / "ds", held_out=0.05)
    assert stats.split_by == "session"
    assert stats.by_split["test"] > 0
    assert stats.by_split["train"] > 0
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "1 repositories are too few for a repository split" in card
    test_sessions = {
        r["session_id"]
        for r in read_table(tmp_path / "ds" / "data" / "calls" / "test-00000-of-00001.parquet").to_pylist()
    }
    train_sessions = {
        r["session_id"]
        for r in read_table(tmp_path / "ds" / "data" / "calls" / "train-00000-of-00001.parquet").to_pylist()
    }
    assert test_sessions
    assert not test_sessions & train_sessions  # a session never straddles the splits
    assert json.loads((tmp_path / "ds" / "stats.json").read_text())["split"]["by"] == "session"
