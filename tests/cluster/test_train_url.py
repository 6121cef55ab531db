"""The trainer reads call records from a storage URL in place (records.io through records.storage): the
rows it would train on are the same as from the local folder. The store is the local S3-compatible
server standing in for a real one (tests/support/s3.py)."""

from __future__ import annotations

from pathlib import Path

from records.io import parquet_files
from records.storage import Store
from tests.support.s3 import local_s3
from trainer.config import TrainConfig
from trainer.data.records import read_rows
from trainer.rundir import resolve_data

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def test_trainer_rows_from_a_bucket_equal_the_local_ones() -> None:
    with local_s3() as s3:
        url = f"s3://{s3.new_bucket()}/run"
        store = Store.from_url(url)
        for f in parquet_files(FIXTURES):
            store.upload(f, f"calls/{f.name}")
        source = resolve_data(TrainConfig(data=url))
        assert source == url  # a URL is kept as is, never mistaken for a missing folder
        remote = list(read_rows(source))
    local = list(read_rows(FIXTURES))
    assert len(remote) == len(local) > 0
    assert [r["call_id"] for r in remote] == [r["call_id"] for r in local]
    assert remote[0].keys() == local[0].keys()
