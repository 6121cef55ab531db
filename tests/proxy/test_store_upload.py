"""`python -m proxy serve --store-url URL`: the proxy uploads its rolled parts itself, on a thread of its own.

Real processes on loopback: the proxy, the scripted upstream (tests/fakes/scripted_upstream.py, standing in
for the target) and, as the object store, moto's S3-compatible server (tests/support/s3.py: no real store
can be installed or reached here). The spool stays the durability line: a call is answered once it is
fsync'd locally whatever the store does, and a part leaves DATA_DIR/calls only once the store has it."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from records.io import read_table
from records.storage import Store
from tests.proxy.live import LiveProxy, proxy_server, scripted_upstream
from tests.support.s3 import LocalS3, local_s3

CHAT = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
FAST = ("--upload-poll-s", "0.2", "--upload-backoff-max-s", "0.5")  # retries at test pace


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with scripted_upstream() as url:
        yield url


@pytest.fixture(scope="module")
def s3() -> Iterator[LocalS3]:
    with local_s3() as server:  # the AWS_* variables are in os.environ: the proxy process inherits them
        yield server


def _calls(proxy: LiveProxy, n: int, session: str) -> None:
    for _ in range(n):
        r = httpx.post(f"{proxy.url}/s/{session}/v1/chat/completions", json=CHAT, timeout=30)
        assert r.status_code == 200, r.text  # answered: the call is in the local spool


def _stored(store: str) -> list[str]:
    return read_table(store, ["session_id"]).column("session_id").to_pylist()


def _until(check: Callable[[], bool], timeout_s: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)


def _local_parts(data: Path) -> list[Path]:
    return sorted((data / "calls").glob("*.parquet")) if (data / "calls").exists() else []


def test_calls_land_in_the_bucket_and_leave_the_host(upstream: str, s3: LocalS3, tmp_path: Path) -> None:
    store = f"s3://{s3.new_bucket()}/run"
    data = tmp_path / "data"
    with proxy_server(upstream, data, "--store-url", store, *FAST) as proxy:
        _calls(proxy, 3, "sess-a")
        _until(lambda: len(Store.from_url(store).list("calls", ".parquet")) >= 1, what="a part in the bucket")
        _until(lambda: sorted(_stored(store)) == ["sess-a"] * 3, what="all three calls in the bucket")
        health = httpx.get(f"{proxy.url}/healthz", timeout=5).json()
        assert health["upload"]["store"] == store
        assert health["upload"]["uploaded"] >= 1
        metrics = httpx.get(f"{proxy.url}/metrics", timeout=5).text
        assert "dflash_proxy_upload_parts" in metrics
    assert _local_parts(data) == []  # every part removed locally once the store confirmed it


def test_a_folder_as_the_store_and_the_last_segment_uploaded_on_shutdown(
    upstream: str, tmp_path: Path
) -> None:
    """The segment still open at SIGTERM (its age limit is far away) is rolled and uploaded on the way out."""
    store = tmp_path / "shared"
    data = tmp_path / "data"
    with proxy_server(
        upstream, data, "--store-url", str(store), "--segment-max-age-s", "600", *FAST
    ) as proxy:
        _calls(proxy, 2, "sess-b")
        assert not (store / "calls").exists()  # nothing rolled yet
        proxy.proc.send_signal(signal.SIGTERM)
        assert proxy.proc.wait(timeout=60) in (
            0,
            -signal.SIGTERM,
        )  # uvicorn re-raises the signal once shut down
    assert sorted(_stored(str(store))) == ["sess-b"] * 2
    assert _local_parts(data) == []
    assert list((data / "spool").glob("*.spool")) == []


def test_a_store_outage_keeps_parts_on_the_host_until_it_is_back(
    upstream: str, s3: LocalS3, tmp_path: Path
) -> None:
    store = f"s3://{s3.new_bucket()}/run"
    data = tmp_path / "data"

    def upload() -> dict:
        return httpx.get(f"{proxy.url}/healthz", timeout=5).json()["upload"]

    with proxy_server(upstream, data, "--store-url", store, *FAST) as proxy:
        s3.stop()
        try:
            _calls(proxy, 1, "sess-c")
            _until(lambda: len(_local_parts(data)) >= 1, what="a rolled part waiting on the host")
            _until(lambda: upload()["failures"] >= 1, what="a failed upload")
            # The agents do not wait for the store: with the uploader failing on it, calls are still
            # answered (each at once from the local spool; a 30 s client timeout is the hang guard).
            _calls(proxy, 3, "sess-c")
            assert upload()["uploaded"] == 0  # none of the answers waited for an upload
            assert httpx.get(f"{proxy.url}/healthz", timeout=5).status_code == 200  # recording is fine
        finally:
            s3.start()
        _until(lambda: _local_parts(data) == [], timeout_s=60, what="the waiting parts uploaded")
    assert sorted(_stored(store)) == ["sess-c"] * 4


def test_a_store_down_at_shutdown_costs_the_deadline_and_the_next_start_uploads(
    upstream: str, s3: LocalS3, tmp_path: Path
) -> None:
    """The final drain gives up after --upload-drain-s; the parts stay in DATA_DIR/calls and the next
    proxy on the data dir uploads them when the store is back."""
    store = f"s3://{s3.new_bucket()}/run"
    data = tmp_path / "data"
    drain = ("--upload-drain-s", "2", "--segment-max-age-s", "600")
    log = tmp_path / "proxy.log"
    with proxy_server(upstream, data, "--store-url", store, *FAST, *drain, log=log) as proxy:
        _calls(proxy, 2, "sess-d")
        s3.stop()
        try:
            proxy.proc.send_signal(signal.SIGTERM)
            try:  # the store is still down: only the drain's deadline can end the exit (60 s hang guard)
                code = proxy.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail("hang guard: the proxy did not exit within 60 s of SIGTERM with the store down")
            assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
        finally:
            s3.start()
    # The drain gave up (its deadline passed with the part not uploaded) and said so.
    assert "1 part(s) left in" in log.read_text(), log.read_text()[-3000:]
    assert len(_local_parts(data)) == 1  # the last segment, rolled, waiting for the store
    with proxy_server(upstream, data, "--store-url", store, *FAST):
        _until(lambda: _local_parts(data) == [], timeout_s=60, what="the parts left by the last run uploaded")
    assert sorted(_stored(store)) == ["sess-d"] * 2
