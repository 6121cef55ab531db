"""`python -m factory harvest --store-url URL` on one host (no `--ray`): the harvest's proxy uploads every
call to the store itself, the transcripts follow, and the export reads the calls from the store.

What stands in: the target is the scripted upstream (tests/fakes/scripted_upstream.py; a GPU vLLM cannot
run here), the sessions are the scripted session runner (`--runner fake`: real calls through the real
proxy, no Docker, so a session takes a second instead of minutes), and the object store is moto's
S3-compatible server on loopback (tests/support/s3.py; no real store can be installed or reached here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from records.io import read_table
from records.storage import Store
from tests.proxy.live import scripted_upstream
from tests.support import REPO_ROOT
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
        args = [
            sys.executable,
            "-m",
            "factory",
            "harvest",
            "--store-url",
            store,
            "--target-url",
            upstream,
            "--runner",
            "fake",
            "--limit",
            "3",
            "--held-out",
            "0",
            "--data-dir",
            str(data),
        ]
        r = subprocess.run(
            args,
            cwd=REPO_ROOT,
            env={**os.environ, "DFLASH_FAKE_RUNNER_CALLS": "2"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        (tmp_path / "harvest.log").write_text(r.stderr)  # for a failure's post-mortem
        assert r.returncode == 0, r.stderr[-4000:]
        calls = Counter(read_table(store, ["session_id"]).column("session_id").to_pylist())
        transcripts = Store.from_url(store).list("transcripts", suffix=".jsonl.zst")
    assert len(calls) == 3
    assert set(calls.values()) == {2}  # each session's two calls, each once
    assert sorted(Path(k).name.removesuffix(".jsonl.zst") for k in transcripts) == sorted(calls)
    assert not list((data / "calls").glob("*.parquet"))  # uploaded, then removed from the host
    stats = json.loads((data / "dataset" / "stats.json").read_text())  # exported from the bucket
    assert stats["sessions"] == 3
    assert stats["calls"] == 6
