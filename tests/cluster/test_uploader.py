"""proxy.uploader: rolled parts move to the object store; a part leaves the local folder only once the
store confirmed it; an outage keeps the parts locally until the store is back. The store is a local
S3-compatible server (moto's server mode, standing in for a real object store: see tests/support/s3.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.uploader import Uploader
from records.storage import Store
from tests.support.s3 import LocalS3, local_s3


@pytest.fixture(scope="module")
def s3() -> Iterator[LocalS3]:
    with local_s3() as server:
        yield server


def _parts(folder: Path, n: int, start: int = 0) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    for i in range(start, start + n):
        data = f"part {i} ".encode() * (100 + i)
        (folder / f"part-p1-{i:06d}.parquet").write_bytes(data)
        made[f"part-p1-{i:06d}.parquet"] = data
    return made


def _fast(calls: Path, store: Store) -> Uploader:
    return Uploader(calls, store, poll_s=0.1, attempts=2, backoff_s=0.05, backoff_max_s=0.2)


def test_parts_are_uploaded_then_removed(s3: LocalS3, tmp_path: Path) -> None:
    store = Store.from_url(f"s3://{s3.new_bucket()}/run")
    calls = tmp_path / "calls"
    made = _parts(calls, 3)
    (calls / ".part-p1-000009.parquet.123.tmp").write_bytes(b"a roll in progress")
    up = _fast(calls, store)
    assert up.sweep() == (3, 0)
    assert store.list("calls", suffix=".parquet") == [f"calls/{n}" for n in sorted(made)]
    for name, data in made.items():
        assert store.read_bytes(f"calls/{name}") == data
        assert not (calls / name).exists()
    assert (calls / ".part-p1-000009.parquet.123.tmp").exists()  # never touched: not a finished part
    assert up.stats.uploaded == 3
    assert up.stats.bytes == sum(len(d) for d in made.values())


def test_outage_keeps_parts_locally_until_the_store_is_back(s3: LocalS3, tmp_path: Path) -> None:
    store = Store.from_url(f"s3://{s3.new_bucket()}/run")
    calls = tmp_path / "calls"
    up = _fast(calls, store)
    up.start()
    made = _parts(calls, 2)
    up.notify()
    deadline = time.monotonic() + 30
    while up.pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not up.pending()
    s3.stop()
    try:
        made |= _parts(calls, 3, start=2)
        up.notify()
        deadline = time.monotonic() + 30
        while not up.stats.postponed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert up.stats.postponed >= 1
        assert up.stats.failures >= 1
        assert len(up.pending()) == 3  # nothing removed while the store cannot confirm
    finally:
        s3.start()
    assert up.close(drain_timeout_s=60) == 0
    assert not up.pending()
    assert store.list("calls", suffix=".parquet") == [f"calls/{n}" for n in sorted(made)]
    assert all(store.read_bytes(f"calls/{n}") == d for n, d in made.items())


def test_a_part_uploaded_twice_is_one_object(s3: LocalS3, tmp_path: Path) -> None:
    """A process killed between the confirmed upload and the local unlink uploads the part again on
    its next start: the same name, the same bytes, so still one object in the store."""
    store = Store.from_url(f"s3://{s3.new_bucket()}/run")
    calls = tmp_path / "calls"
    made = _parts(calls, 1)
    ((name, data),) = made.items()
    store.upload(calls / name, f"calls/{name}")  # the earlier process got this far, then died
    assert _fast(calls, store).sweep() == (1, 0)
    assert store.list(suffix=".parquet") == [f"calls/{name}"]
    assert store.read_bytes(f"calls/{name}") == data


def test_local_folder_as_the_store(tmp_path: Path) -> None:
    store = Store.from_url(tmp_path / "shared")
    calls = tmp_path / "calls"
    made = _parts(calls, 2)
    assert _fast(calls, store).drain(5) == 0
    assert sorted(p.name for p in (tmp_path / "shared" / "calls").iterdir()) == sorted(made)


def test_cli_once_uploads_and_reports(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from proxy.uploader import app

    made = _parts(tmp_path / "data" / "calls", 2)
    args = ["--data-dir", str(tmp_path / "data"), "--store-url", str(tmp_path / "store"), "--once"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "uploaded 2 part(s)" in res.output
    assert sorted(p.name for p in (tmp_path / "store" / "calls").iterdir()) == sorted(made)
    missing = CliRunner().invoke(app, ["--data-dir", str(tmp_path / "data"), "--once"])
    assert missing.exit_code == 2
    assert "store" in missing.output


def test_nested_parts_keep_their_path_and_a_part_taken_by_another_uploader_is_skipped(tmp_path: Path) -> None:
    store = Store.from_url(tmp_path / "store")
    calls = tmp_path / "calls"
    nested = calls / "2026-12-01" / "part-n-000001.parquet"
    nested.parent.mkdir(parents=True)
    nested.write_bytes(b"nested part")
    up = _fast(calls, store)
    assert up.pending() == [nested]
    # Two uploaders share a folder (two nodes on one host): the other one took this part already.
    assert up.upload_part(calls / "part-gone-000001.parquet") == 0
    assert up.stats.failures == 0
    assert up.sweep() == (1, 0)
    assert store.read_bytes("calls/2026-12-01/part-n-000001.parquet") == b"nested part"
