"""Spool frames, group commit, rolling into Parquet, and what a killed process leaves behind."""

from __future__ import annotations

import fcntl
import json

import pyarrow.dataset as ds

from proxy.record import Call, decode_stream
from proxy.roller import part_name, roll_all, roll_segment
from proxy.sink import SpoolSink


def make_call(i: int) -> Call:
    c = Call(method="POST", path="/v1/chat/completions", api="openai_chat", upstream="u", proxy_id="p")
    c.session_id = f"s{i}"
    c.request_body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}).encode()
    c.response_chunks = [b'{"choices":[{"index":0,"message":{"content":"a"},', b'"finish_reason":"stop"}]}']
    c.response_content_type = "application/json"
    c.status_code = 200
    c.finish()
    return c


def test_frames_round_trip_and_a_torn_tail_is_ignored():
    blob = make_call(1).encode() + make_call(2).encode()
    calls, used = decode_stream(blob)
    assert [c.session_id for c in calls] == ["s1", "s2"]
    assert used == len(blob)
    torn, used = decode_stream(blob[:-7])
    assert [c.session_id for c in torn] == ["s1"]
    assert used < len(blob)
    corrupt = bytearray(blob)
    corrupt[-3] ^= 0xFF
    assert [c.session_id for c in decode_stream(bytes(corrupt))[0]] == ["s1"]


def test_sink_makes_calls_durable_then_rolls_them_into_parquet(tmp_path):
    sink = SpoolSink(
        tmp_path / "spool", tmp_path / "calls", "p1", max_records=3, max_bytes=1 << 20, max_age_s=60
    )
    sink.start()
    for i in range(7):  # one at a time: a group-committed batch always lands in one segment
        sink.submit(make_call(i)).result(timeout=10)
    sink.close()
    table = ds.dataset(tmp_path / "calls").to_table()
    assert sorted(table.column("session_id").to_pylist()) == sorted(f"s{i}" for i in range(7))
    assert len(list((tmp_path / "calls").glob("part-*.parquet"))) == 3  # 3 + 3 + 1 records
    assert list((tmp_path / "spool").glob("*.spool")) == []
    assert sink.written == 7
    assert sink.depth == 0


def test_roll_skips_live_segments_and_never_duplicates(tmp_path):
    spool, calls_dir = tmp_path / "spool", tmp_path / "calls"
    spool.mkdir()
    dead = spool / "dead-0001.spool"
    dead.write_bytes(make_call(1).encode() + make_call(2).encode())
    live = spool / "live-0001.spool"
    live.write_bytes(make_call(3).encode())
    with live.open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # what a running proxy holds on its open segment
        assert roll_all(spool, calls_dir) == (1, 2)
    assert live.exists()
    assert not dead.exists()
    # A roller killed after the rename but before the unlink: the part exists and the segment too.
    dead.write_bytes(make_call(1).encode() + make_call(2).encode())
    assert (calls_dir / part_name(dead)).exists()
    assert roll_segment(dead, calls_dir) == 2
    assert roll_all(spool, calls_dir) == (1, 1)
    ids = ds.dataset(calls_dir).to_table().column("session_id").to_pylist()
    assert sorted(ids) == ["s1", "s2", "s3"]


def test_hidden_temp_parts_do_not_break_readers(tmp_path):
    spool, calls_dir = tmp_path / "spool", tmp_path / "calls"
    spool.mkdir()
    (spool / "a.spool").write_bytes(make_call(1).encode())
    roll_all(spool, calls_dir)
    (calls_dir / ".part-x.parquet.123.tmp").write_bytes(b"PAR1 half written")
    assert ds.dataset(calls_dir).to_table().num_rows == 1
