"""The spool under faults (issue 16, defects 1 and 9): a failed write, a damaged frame, a full disk, a roll
that fails while the proxy runs. Each asserts the mechanism: whole frames only, damage skipped, nothing that
was acknowledged lost."""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

import proxy.spool
from proxy import frames
from proxy.part import PartWriter
from proxy.record import Call, Spill, decode_stream
from proxy.roller import roll_all
from proxy.sink import SpoolSink
from proxy.spool import SpoolWriter
from tests.proxy.conftest import fill


def make_call(i: int, response_bytes: int = 0) -> Call:
    c = Call(method="POST", path="/v1/chat/completions", api="openai_chat", upstream="u", proxy_id="p")
    c.session_id = f"s{i}"
    c.request_body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}).encode()
    text = "x" * response_bytes
    c.response_chunks = [json.dumps({"choices": [{"index": 0, "message": {"content": text}}]}).encode()]
    c.response_content_type = "application/json"
    c.status_code = 200
    c.finish()
    return c


def sessions(calls_dir: Path) -> list[str]:
    return sorted(ds.dataset(calls_dir).to_table(columns=["session_id"]).column("session_id").to_pylist())


def segment(spool: Path) -> Path:
    (seg,) = spool.glob("*.spool")
    return seg


def test_a_damaged_frame_is_skipped_and_the_roll_goes_on(tmp_path, caplog):
    spool, calls_dir = tmp_path / "spool", tmp_path / "calls"
    spool.mkdir()
    good1, bad, good2 = make_call(1).encode(), bytearray(make_call(2).encode()), make_call(3).encode()
    bad[len(bad) // 2] ^= 0xFF  # a bad disk block inside the second frame
    (spool / "a.spool").write_bytes(good1 + bytes(bad) + b"garbage" + good2 + good1[:40])
    with caplog.at_level(logging.WARNING, logger="proxy.roller"):
        assert roll_all(spool, calls_dir) == (1, 2)
    assert sessions(calls_dir) == ["s1", "s3"]
    assert "damaged" in caplog.text
    assert "torn trailing" in caplog.text


def test_frames_written_before_the_checksummed_head_still_roll(tmp_path):
    """A segment left by the previous proxy version (frames "DFC1") rolls like any other."""
    import struct
    import zlib
    from dataclasses import asdict

    def legacy(call: Call) -> bytes:
        meta = {k: v for k, v in asdict(call).items() if k not in frames_blobs}
        header = json.dumps(meta, separators=(",", ":")).encode()
        response = b"".join(call.response_chunks)
        body = header + call.request_body + response
        head = struct.pack("<4sIIQII", b"DFC1", len(header), len(call.request_body), len(response), 0, 0)
        return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4] + body)) + body

    frames_blobs = {
        "request_body",
        "upstream_request_body",
        "response_chunks",
        "response_spill",
        "handed_over",
    }
    spool, calls_dir = tmp_path / "spool", tmp_path / "calls"
    spool.mkdir()
    (spool / "old.spool").write_bytes(legacy(make_call(1)) + make_call(2).encode())
    assert roll_all(spool, calls_dir) == (1, 2)
    assert sessions(calls_dir) == ["s1", "s2"]


def test_a_write_that_fails_midway_is_cut_back_and_later_calls_are_kept(tmp_path, monkeypatch):
    """Defect 1's mechanism without a real disk: the second frame's write fails after 100 bytes."""
    spool = tmp_path / "spool"
    closed: list[Path] = []
    writer = SpoolWriter(spool, "p", closed.append, max_records=100, max_bytes=1 << 30, max_age_s=3600)
    writer.start()
    writer.submit(make_call(1)).result(timeout=10)
    size_before = segment(spool).stat().st_size
    real_write, budget = os.write, [100]

    def failing_write(fd: int, data: bytes) -> int:
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real_write(fd, bytes(data)[: budget[0]])
        budget[0] -= n
        return n

    monkeypatch.setattr(proxy.spool.os, "write", failing_write)
    with pytest.raises(OSError, match="No space"):
        writer.submit(make_call(2, response_bytes=10_000)).result(timeout=10)
    assert segment(spool).stat().st_size == size_before  # no partial frame left behind
    assert not writer.health.ok
    assert "disk full" in (writer.health.reason or "")
    monkeypatch.setattr(proxy.spool.os, "write", real_write)
    deadline = time.monotonic() + 5
    while not writer.health.ok and time.monotonic() < deadline:  # the probe write succeeds again
        time.sleep(0.05)
    assert writer.health.ok
    for i in (3, 4):
        writer.submit(make_call(i)).result(timeout=10)
    writer.close()
    calls, used = decode_stream(closed[0].read_bytes())
    assert [c.session_id for c in calls] == ["s1", "s3", "s4"]
    assert used == closed[0].stat().st_size


def test_full_disk_refuses_then_recovers_and_loses_no_acknowledged_call(small_disk, caplog):
    """Defect 1 as reproduced: a 3 MiB tmpfs filled to the brim, 100 KB calls, then space freed."""
    spool, calls_dir = small_disk / "spool", small_disk / "calls"
    sink = SpoolSink(spool, calls_dir, "p", max_records=1000, max_bytes=1 << 30, max_age_s=3600)
    sink.start()
    acknowledged = []
    for i in range(3):
        sink.submit(make_call(i, 100_000)).result(timeout=10)
        acknowledged.append(f"s{i}")
    fill(small_disk)
    for i in range(3, 11):
        with pytest.raises(OSError, match="No space"):
            sink.submit(make_call(i, 100_000)).result(timeout=10)
    assert not sink.health.ok
    assert "disk full" in (sink.health.reason or "")
    (small_disk / "filler").unlink()
    deadline = time.monotonic() + 5
    while not sink.health.ok and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sink.health.ok, sink.health
    for i in range(11, 19):
        sink.submit(make_call(i, 100_000)).result(timeout=10)
        acknowledged.append(f"s{i}")
    with caplog.at_level(logging.WARNING, logger="proxy.roller"):
        sink.close()
    assert sessions(calls_dir) == sorted(acknowledged)
    assert "torn" not in caplog.text
    assert "damaged" not in caplog.text


def test_free_space_below_the_reserve_makes_the_spool_unhealthy(small_disk):
    writer = SpoolWriter(small_disk / "spool", "p", lambda p: None, min_free_bytes=1 << 20)
    writer.start()
    assert writer.health.ok
    fill(small_disk, leave=512 * 1024)
    deadline = time.monotonic() + 5
    while writer.health.ok and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not writer.health.ok
    assert "bytes free" in (writer.health.reason or "")
    writer.close()


def test_a_failed_roll_is_retried_while_the_proxy_runs(tmp_path, monkeypatch):
    """Defect 9: a segment whose roll failed waited for a restart; now it is retried with backoff."""
    real, failures = PartWriter.write, [2]

    def flaky(self, calls):
        if failures[0] > 0:
            failures[0] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, calls)

    monkeypatch.setattr(PartWriter, "write", flaky)
    sink = SpoolSink(
        tmp_path / "spool", tmp_path / "calls", "p", max_records=1, max_bytes=1 << 30, max_age_s=3600
    )
    sink.start()
    sink.submit(make_call(1)).result(timeout=10)
    deadline = time.monotonic() + 15
    while not list((tmp_path / "calls").glob("part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sessions(tmp_path / "calls") == ["s1"]  # rolled while running: 1 s, then 2 s of backoff
    assert sink.roll_failures == 2
    assert sink.depth == 0
    sink.close()


def test_a_spilled_response_is_framed_and_rolled_block_by_block(tmp_path):
    """Defect 7's storage side: a response that went to a spill file reaches Parquet whole."""
    events = b"".join(
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"tok "}}]}\n\n' for _ in range(20_000)
    )
    call = make_call(1)
    call.response_chunks = []
    call.response_content_type = "text/event-stream"
    call.response_spill = Spill.create(tmp_path)
    for i in range(0, len(events), 1 << 16):
        call.response_spill.write(events[i : i + (1 << 16)])
    call.response_chunks = [b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n']
    sink = SpoolSink(
        tmp_path / "spool", tmp_path / "calls", "p", max_records=10, max_bytes=1 << 30, max_age_s=3600
    )
    sink.start()
    sink.submit(call).result(timeout=10)
    call.release()
    sink.close()
    (row,) = ds.dataset(tmp_path / "calls").to_table().to_pylist()
    body = json.loads(row["response_json"])
    assert body["choices"][0]["message"]["content"] == "tok " * 20_000
    assert row["finish_reason"] == "stop"
    assert frames.MAGIC == b"DFC2"


def test_a_roll_in_another_process_never_removes_a_part_being_written(tmp_path):
    """`proxy roll` (or a second proxy) removes temp parts of dead rollers only: a live one holds a lock."""
    from proxy.part import remove_stale

    calls_dir = tmp_path / "calls"
    calls_dir.mkdir()
    (calls_dir / ".part-dead.parquet.1.tmp").write_bytes(b"PAR1 half written")
    with PartWriter(calls_dir, "part-live.parquet") as part:
        part.write([make_call(1)])
        remove_stale(calls_dir)
        assert [p.name for p in calls_dir.glob(".part-*.tmp")] == [f".part-live.parquet.{os.getpid()}.tmp"]
    assert sessions(calls_dir) == ["s1"]
