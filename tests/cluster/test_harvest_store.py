"""`python -m factory harvest --store-url URL` on one host (no `--ray`): the harvest's proxy uploads every
call to the store itself, the transcripts follow, and the export reads the calls from the store.

What stands in: the target is the scripted upstream (tests/fakes/scripted_upstream.py; a GPU vLLM cannot
run here), the sessions are the scripted session runner (`--runner fake`: real calls through the real
proxy, no Docker, so a session takes a second instead of minutes), and the object store is moto's
S3-compatible server on loopback (tests/support/s3.py; no real store can be installed or reached here)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from records.io import read_table
from records.storage import Store
from tests.factory.reaping import finish, harvest
from tests.proxy.live import scripted_upstream
from tests.support.s3 import local_s3

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with scripted_upstream() as url:
        yield url


def test_single_host_harvest_lands_calls_and_transcripts_in_the_store(upstream: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with local_s3() as s3:  # the AWS_* variables are in os.environ: the harvest and its proxy inherit them
        store = f"s3://{s3.new_bucket()}/single"
        args = ("--store-url", store, "--target-url", upstream, "--runner", "fake")
        finish(harvest(data, *args, env={"DFLASH_FAKE_RUNNER_CALLS": "2"}, limit=3), timeout_s=600)
        calls = Counter(read_table(store, ["session_id"]).column("session_id").to_pylist())
        transcripts = Store.from_url(store).list("transcripts", suffix=".jsonl.zst")
    assert len(calls) == 3
    assert set(calls.values()) == {2}  # each session's two calls, each once
    assert sorted(Path(k).name.removesuffix(".jsonl.zst") for k in transcripts) == sorted(calls)
    assert not list((data / "calls").glob("*.parquet"))  # uploaded, then removed from the host
    stats = json.loads((data / "dataset" / "stats.json").read_text())  # exported from the bucket
    assert stats["sessions"] == 3
    assert stats["calls"] == 6
