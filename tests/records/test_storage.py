"""records.storage against a local folder and a local S3-compatible server (moto's server mode, standing
in for a real object store, which cannot be installed or reached here; see tests/support/s3.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import EndpointConnectionError

from records.storage import StorageError, Store, calls_store, is_url, parquet_keys
from tests.support.s3 import LocalS3, local_s3


@pytest.fixture(scope="module")
def s3() -> Iterator[LocalS3]:
    with local_s3() as server:
        yield server


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_is_url() -> None:
    assert is_url("s3://b/p")
    assert is_url("gs://b")
    assert is_url("memory://x")
    assert not is_url("/data/run")
    assert not is_url("file:///data/run")
    assert not is_url(Path("data"))


def test_local_upload_is_atomic_and_listed(tmp_path: Path) -> None:
    store = Store.from_url(tmp_path / "store")
    src = _file(tmp_path, "a.parquet", b"x" * 1000)
    assert store.upload(src, "calls/part-1.parquet") == 1000
    (tmp_path / "store" / "calls" / ".part-2.parquet.tmp").write_bytes(b"half")  # a writer's temporary
    (tmp_path / "store" / "calls" / "_SUCCESS").write_bytes(b"")
    assert store.list("calls", suffix=".parquet") == ["calls/part-1.parquet"]
    assert store.read_bytes("calls/part-1.parquet") == b"x" * 1000
    assert not list((tmp_path / "store" / "calls").glob(".part-1*"))  # no temporary left behind
    assert src.exists()  # the source is the caller's to remove


def test_bad_scheme_is_a_clear_error() -> None:
    with pytest.raises(StorageError, match="nosuch://"):
        Store.from_url("nosuch://bucket/x")


def test_s3_upload_list_read(s3: LocalS3, tmp_path: Path) -> None:
    bucket = s3.new_bucket()
    store = Store.from_url(f"s3://{bucket}/run1")
    assert not store.local
    assert store.list() == []
    src = _file(tmp_path, "p.parquet", b"0123456789")
    assert store.upload(src, "calls/part-a.parquet") == 10
    store.write_bytes("transcripts/ab/s.jsonl.zst", b"t")
    # A second client (another process would be the same) sees the objects at once: no stale listings.
    other = Store.from_url(f"s3://{bucket}/run1")
    assert other.list(suffix=".parquet") == ["calls/part-a.parquet"]
    assert other.list("transcripts") == ["transcripts/ab/s.jsonl.zst"]
    assert other.read_bytes("calls/part-a.parquet") == b"0123456789"
    assert other.is_dir("calls")
    assert not other.is_dir("nothing")


def test_calls_store_finds_the_calls_like_calls_dir(s3: LocalS3, tmp_path: Path) -> None:
    bucket = s3.new_bucket()
    table = pa.table({"call_id": ["c1", "c2"]})
    pq.write_table(table, tmp_path / "t.parquet")
    root = Store.from_url(f"s3://{bucket}/exp")
    root.upload(tmp_path / "t.parquet", "dataset/data/calls/train-00000-of-00001.parquet")
    found = calls_store(f"s3://{bucket}/exp")
    assert found.url == f"s3://{bucket}/exp/dataset/data/calls"
    keys = list(parquet_keys(found))
    assert keys == ["train-00000-of-00001.parquet"]
    with found.open(keys[0]) as fh:
        assert pq.read_table(fh).column("call_id").to_pylist() == ["c1", "c2"]
    # A URL that is itself the calls folder is used as is.
    assert calls_store(f"s3://{bucket}/exp/dataset/data/calls").url == found.url


def test_s3_outage_raises_and_recovers(s3: LocalS3, tmp_path: Path) -> None:
    bucket = s3.new_bucket()
    store = Store.from_url(f"s3://{bucket}/o")
    src = _file(tmp_path, "x.parquet", b"abc")
    s3.stop()
    try:
        with pytest.raises(EndpointConnectionError):  # the store is down
            store.upload(src, "calls/x.parquet")
    finally:
        s3.start()
    assert store.upload(src, "calls/x.parquet") == 3


def test_records_io_reads_call_records_from_a_url(s3: LocalS3, tmp_path: Path) -> None:
    """What the trainer reads (records.io.read_batches) is the same from a bucket as from a folder."""
    from records.io import parquet_files, read_table

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "records"
    files = parquet_files(fixtures)
    bucket = s3.new_bucket()
    store = Store.from_url(f"s3://{bucket}/run")
    for f in files:
        store.upload(f, f"calls/{f.name}")
    local = read_table(fixtures)
    remote = read_table(f"s3://{bucket}/run")
    assert remote.num_rows == local.num_rows > 0
    assert remote.column_names == local.column_names
    assert remote.column("call_id").to_pylist() == local.column("call_id").to_pylist()
    with pytest.raises(FileNotFoundError, match="no Parquet"):
        read_table(f"s3://{bucket}/empty")


def test_mirror_fetches_only_new_or_changed_files(s3: LocalS3, tmp_path: Path) -> None:
    store = Store.from_url(f"s3://{s3.new_bucket()}/run").child("calls")
    store.write_bytes("part-1.parquet", b"one")
    store.write_bytes("sub/part-2.parquet", b"two")
    store.write_bytes("notes.txt", b"not a part")
    cache = tmp_path / "cache"
    got = store.mirror(cache)
    assert got == [cache / "part-1.parquet", cache / "sub" / "part-2.parquet"]
    assert (cache / "sub" / "part-2.parquet").read_bytes() == b"two"
    (cache / "part-1.parquet").write_bytes(b"own")  # same size: taken as the same part, kept
    store.write_bytes("sub/part-2.parquet", b"two, longer")
    store.mirror(cache)
    assert (cache / "part-1.parquet").read_bytes() == b"own"
    assert (cache / "sub" / "part-2.parquet").read_bytes() == b"two, longer"
    assert not list(cache.rglob(".*.tmp"))
