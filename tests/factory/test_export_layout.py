"""The exported layout at agent scale: calls sliced out of their trajectories give back every id and request
(through records.io, shard by shard), shards are cut by bytes, the same input exports to the same bytes, an
interrupted export reruns, and the held-out split is never empty. tests/factory/test_dataset_plain.py reads
the same layout without this project's code."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from factory.publish.export import export
from records.io import read_table

from .helpers import CHAT_CALL
from .test_export_ids import finished_sessions, write_parts


def session_calls(session: str, turns: int, seed: int, start: int = 0) -> list[dict]:
    """An agent session: every call resends the history and adds a turn (prompt ids grow)."""
    rng = np.random.default_rng(seed)
    history = rng.integers(0, 150_000, 400).tolist()  # system prompt and tools
    out = []
    for t in range(turns):
        history += rng.integers(0, 150_000, int(rng.integers(50, 400))).tolist()
        stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=start + 10 * t)
        out.append(
            {
                **CHAT_CALL,
                "call_id": f"{session}-{t:03d}",
                "session_id": session,
                "user_agent": "opencode/1.18.33 ai-sdk/provider-utils/4.0.23",
                "request_json": json.dumps(
                    {
                        "messages": [f"{session} turn {i}: " + "edit the file " * 30 for i in range(t + 1)],
                        "tools": ["bash"] * 40,
                    }
                ),
                "response_json": json.dumps({"choices": [{"message": {"content": f"reply {t}"}}]}),
                "started_at": stamp,
                "first_byte_at": stamp,
                "finished_at": stamp,
                "prompt_token_ids": list(history),
                "completion_token_ids": rng.integers(0, 150_000, 20).tolist(),
                "prompt_tokens": len(history),
                "completion_tokens": 20,
            }
        )
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
def test_trajectories_give_back_every_call_whole_and_take_a_fraction_of_the_space(tmp_path, agent_traffic):
    sessions, rows = agent_traffic
    out = tmp_path / "ds"
    stats = export(sessions, tmp_path / "data", out)
    assert stats.calls == len(rows) == 120
    assert stats.trajectories == 4  # each 30-turn session is one chain of prompts extending each other
    got = {r["call_id"]: r for r in read_table(out).to_pylist()}
    for r in rows:
        assert got[r["call_id"]]["prompt_token_ids"] == r["prompt_token_ids"]
        assert json.loads(got[r["call_id"]]["request_json"]) == json.loads(r["request_json"])
    assert sorted(
        r["turn_index"] for r in got.values() if r["call_id"].startswith(rows[0]["session_id"])
    ) == list(range(30))
    data = out / "data"
    stored_ids = sum(
        len(x)
        for f in data.glob("trajectories/*.parquet")
        for x in pq.read_table(f).column("token_ids").to_pylist()
    )
    assert stored_ids < 0.1 * sum(len(r["prompt_token_ids"]) for r in rows)  # each id once, not per call
    calls = pq.read_table(data / "calls").to_pylist()
    assert all(len(c["messages_tail"]) == 0 for c in calls)  # every request a prefix of its session's last
    assert {c["messages_field"] for c in calls} == {"messages"}


def test_shards_are_cut_by_bytes_and_each_reads_back(tmp_path, agent_traffic):
    sessions, rows = agent_traffic
    out = tmp_path / "ds"
    lines: list[str] = []
    stats = export(sessions, tmp_path / "data", out, shard_bytes=15_000, held_out=0.0, progress=lines.append)
    assert lines[0].startswith("export: 120 calls in 1 parts")
    assert lines[-1] == "export: 120 calls and 12 sessions written; exact ids kept on 100.0%"
    shards = sorted((out / "data" / "calls").glob("*.parquet"))
    assert len(shards) >= 2
    assert len(list((out / "data" / "trajectories").glob("*.parquet"))) >= 3
    assert [p.name for p in shards] == [
        f"train-{i:05d}-of-{len(shards):05d}.parquet" for i in range(len(shards))
    ]
    want = {r["call_id"]: r["prompt_token_ids"] for r in rows}
    for shard in shards:  # a shard alone reads its split's trajectories forward to its own
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
    assert "fewer than two repositories: whole sessions held out" in card
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
