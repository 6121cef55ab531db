"""`factory run --ray`: sessions spread by a real two-node Ray cluster (started once for the module), calls
landing in an object store, and the faults the ledger must survive.

What stands in: the object store is moto's S3-compatible server on loopback (no real store can be
installed or reached here; tests/support/s3.py); the target is the scripted upstream; the sessions are the
scripted session runner (`--runner fake`) making real Chat Completions calls through each node's real
proxy — Docker sandboxes would make every session minutes long on this 2-core machine, and placing,
proxying, spooling, uploading and retrying are the same for both runners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from sqlalchemy import select

from factory.db import Session, connect, default_url, session_factory
from factory.ingest import sample
from factory.run.plan import PlanConfig, plan
from records.io import read_table
from records.storage import Store
from tests.cluster.ray_cluster import RAY_ENV, RayCluster
from tests.support import REPO_ROOT, free_port, last_json
from tests.support.s3 import LocalS3, local_s3

pytestmark = [pytest.mark.slow]


@dataclass
class Env:
    s3: LocalS3
    upstream: str
    cluster: RayCluster
    root: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("cluster")
    with local_s3() as s3:  # the AWS_* variables are now in os.environ: the Ray nodes inherit them
        port = free_port()
        up = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.scripted_upstream", "--port", str(port)],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        cluster = RayCluster(root)
        try:
            cluster.start_head(sandboxes=2)
            cluster.add_node(sandboxes=2, name="node2")
            cluster.wait_nodes(2)
            url = f"http://127.0.0.1:{port}"
            httpx.get(f"{url}/health", timeout=30).raise_for_status()
            yield Env(s3, url, cluster, root)
        finally:
            cluster.stop()
            up.terminate()
            up.wait(10)


def _planned(data: Path, *, one_per_issue: bool = False) -> str:
    """The bundled sample's sessions (36), or one per issue (6: one agent, one language) for the runs
    that must finish every session (`--limit` counts claims, and a retry is a claim)."""
    db = default_url(data)
    sessions = session_factory(connect(db))
    sample.install(sessions, data / "sample-repos")
    plan(sessions, PlanConfig(agents={"codex": 1.0}, langs={"en": 1.0}) if one_per_issue else PlanConfig())
    return db


def _driver(
    env: Env, data: Path, store: str, *, limit: int | None, sleep_s: float, log: Path
) -> subprocess.Popen[str]:
    node_env = {
        "DFLASH_RAY_NODE_DIR": str(env.root / "node"),  # both nodes are on this host: one shared node dir
        "DFLASH_RAY_FAKE_LOG": str(log),
        "DFLASH_RAY_FAKE_SLEEP_S": str(sleep_s),
        "DFLASH_RAY_SEGMENT_MAX_AGE_S": "1",
        "DFLASH_RAY_UPLOAD_POLL_S": "0.5",
        "DFLASH_RAY_UPLOAD_BACKOFF_MAX_S": "2",
    }
    args = [
        sys.executable,
        "-m",
        "factory",
        "run",
        "--ray",
        env.cluster.address,
        "--store-url",
        store,
        "--upstream",
        env.upstream,
        "--runner",
        "fake",
        "--model",
        "scripted",
        "--backoff",
        "0.2",
        "--data-dir",
        str(data),
        *(["--limit", str(limit)] if limit is not None else []),
    ]
    return subprocess.Popen(
        args,
        cwd=REPO_ROOT,
        env={**os.environ, **RAY_ENV, **node_env},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _summary(proc: subprocess.Popen[str], timeout: float = 240) -> dict[str, object]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-4000:]
    return last_json(out)  # type: ignore[return-value]


def _events(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _calls_by_attempt(store: str) -> Counter[str]:
    return Counter(read_table(store, ["session_id"]).column("session_id").to_pylist())


def test_sessions_spread_over_both_nodes_and_calls_land_in_the_bucket(env: Env, tmp_path: Path) -> None:
    data = tmp_path / "data"
    db = _planned(data)
    store = f"s3://{env.s3.new_bucket()}/run"
    summary = _summary(_driver(env, data, store, limit=8, sleep_s=1.0, log=tmp_path / "fake.jsonl"))
    assert summary["done"] == 8
    by_node = summary["done_by_node"]
    assert isinstance(by_node, dict)
    assert len(by_node) == 2, by_node  # 4 sandbox slots, 4 driver threads: both nodes take sessions
    proxies = summary["proxies"]
    assert isinstance(proxies, list)
    assert [p["parts_left"] for p in proxies] == [[], []]  # every part uploaded before the proxies stopped
    logs = Store.from_url(store).list("logs")
    assert len(logs) == 2  # each node's proxy log (the proxy uploads its parts itself)
    assert all(k in logs for p in proxies for k in p["logs"])
    transcripts = Store.from_url(store).list("transcripts", suffix=".jsonl.zst")
    assert len(transcripts) == 8  # each session's transcript, written by the node that ran it

    sessions = session_factory(connect(db))
    with sessions() as s:
        done = {r.proxy_session_id for r in s.scalars(select(Session).where(Session.status == "done"))}
    calls = _calls_by_attempt(store)
    assert set(calls) == done
    assert set(calls.values()) == {2}  # the fake agent's two calls per session, each once

    from factory.publish.export import export

    out = tmp_path / "dataset"
    stats = export(sessions, data, out, held_out=0.0, calls_url=store)
    assert stats.sessions == 8
    assert stats.calls == 16
    import datasets

    os.environ["HF_DATASETS_OFFLINE"] = "1"
    ds = datasets.load_dataset(str(out), "calls", cache_dir=str(tmp_path / "hf"))
    assert sum(len(split) for split in ds.values()) == 16


def _on_node(pid: object, node_pid: int) -> bool:
    try:
        return any(p.pid == node_pid for p in psutil.Process(int(str(pid))).parents())
    except psutil.NoSuchProcess:
        return False


def test_a_node_killed_mid_session_is_retried_elsewhere_once(env: Env, tmp_path: Path) -> None:
    data = tmp_path / "data"
    db = _planned(data, one_per_issue=True)
    store = f"s3://{env.s3.new_bucket()}/run"
    log = tmp_path / "fake.jsonl"
    node2 = env.cluster.nodes[1]
    driver = _driver(env, data, store, limit=None, sleep_s=6.0, log=log)
    try:
        deadline = time.monotonic() + 120
        while not any(e["event"] == "start" and _on_node(e["pid"], node2.proc.pid) for e in _events(log)):
            assert time.monotonic() < deadline, "no session reached the second node"
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            time.sleep(0.2)
        killed = {e["session"] for e in _events(log) if _on_node(e["pid"], node2.proc.pid)}
        node2.kill()
        summary = _summary(driver)
    finally:
        if driver.poll() is None:
            driver.kill()
        env.cluster.nodes.remove(node2)
        env.cluster.add_node(sandboxes=2, name="node2b")  # a fresh second node for the next tests
    assert summary["done"] == 6
    assert summary["retries"] >= 1
    events = _events(log)
    finishes = Counter(e["session"] for e in events if e["event"] == "finish")
    assert killed
    assert all(finishes[s] == 1 for s in killed)  # retried elsewhere, finished once
    assert set(finishes.values()) == {1}
    sessions = session_factory(connect(db))
    with sessions() as s:
        rows = list(s.scalars(select(Session).where(Session.status == "done")))
    assert len(rows) == 6
    assert {r.attempts for r in rows if r.id in killed} == {2}
    from factory.publish.export import export

    stats = export(sessions, data, tmp_path / "dataset", held_out=0.0, calls_url=store)
    assert stats.sessions == 6
    assert stats.calls == 12  # each session's final attempt, nothing duplicated


def test_an_s3_outage_keeps_calls_in_the_spool_until_it_is_back(env: Env, tmp_path: Path) -> None:
    env.cluster.wait_nodes(2)
    data = tmp_path / "data"
    _planned(data, one_per_issue=True)
    store = f"s3://{env.s3.new_bucket()}/run"
    log = tmp_path / "fake.jsonl"
    driver = _driver(env, data, store, limit=None, sleep_s=2.0, log=log)
    try:
        deadline = time.monotonic() + 120
        while not any(e["event"] == "start" for e in _events(log)):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        env.s3.stop()  # the store is down while sessions make calls and proxies roll parts
        time.sleep(8)
        assert driver.poll() is None  # the agents were never blocked by the outage
        stuck = list((env.root / "node").glob("store-*/calls/*.parquet"))
        env.s3.start()
        summary = _summary(driver)
    finally:
        if env.s3.server is None:
            env.s3.start()
        if driver.poll() is None:
            driver.kill()
    assert stuck  # rolled parts waited on the node's disk while the store was down
    assert summary["done"] == 6
    calls = _calls_by_attempt(store)
    assert len(calls) == 6
    assert set(calls.values()) == {2}


def test_a_restarted_driver_resumes_the_run(env: Env, tmp_path: Path) -> None:
    env.cluster.wait_nodes(2)
    data = tmp_path / "data"
    db = _planned(data, one_per_issue=True)
    store = f"s3://{env.s3.new_bucket()}/run"
    log = tmp_path / "fake.jsonl"
    first = _driver(env, data, store, limit=None, sleep_s=3.0, log=log)
    sessions = session_factory(connect(db))

    def done_now() -> int:
        with sessions() as s:
            return len(list(s.scalars(select(Session).where(Session.status == "done"))))

    deadline = time.monotonic() + 120
    while not done_now():  # the first result is stored: kill the driver mid-run
        assert time.monotonic() < deadline
        assert first.poll() is None, first.communicate()[1][-3000:]
        time.sleep(0.2)
    first.kill()  # SIGKILL: no lease given back, Ray kills the dead driver's tasks
    first.wait(30)
    done_before = done_now()
    assert 1 <= done_before < 6
    second = _summary(_driver(env, data, store, limit=None, sleep_s=0.5, log=log))
    assert second["done"] == 6 - done_before
    proxies = second["proxies"]
    assert isinstance(proxies, list)
    # The killed driver's node proxies (started with another sleep, so other actors) were stopped too.
    assert len(proxies) >= 3
    assert all(p["parts_left"] == [] for p in proxies)
    finishes = Counter(e["session"] for e in _events(log) if e["event"] == "finish")
    with sessions() as s:
        done = list(s.scalars(select(Session).where(Session.status == "done")))
    assert len(done) == 6
    assert all(finishes[r.id] >= 1 for r in done)
    calls = _calls_by_attempt(store)
    assert {r.proxy_session_id for r in done} <= set(calls)
    from factory.publish.export import export

    stats = export(sessions, data, tmp_path / "dataset", held_out=0.0, calls_url=store)
    assert stats.sessions == 6
    assert stats.calls == 12  # the final attempt of each session, once


def test_harvest_with_ray_exports_from_the_bucket(env: Env, tmp_path: Path) -> None:
    """`harvest --ray`: the same one command, its sessions placed on the cluster, its export read from
    the bucket (the harvest's own local proxy only serves the translation step)."""
    env.cluster.wait_nodes(2)
    data = tmp_path / "data"
    store = f"s3://{env.s3.new_bucket()}/harvest"
    node_env = {
        "DFLASH_RAY_NODE_DIR": str(env.root / "node"),
        "DFLASH_RAY_SEGMENT_MAX_AGE_S": "1",
        "DFLASH_RAY_UPLOAD_POLL_S": "0.5",
    }
    args = [
        sys.executable,
        "-m",
        "factory",
        "harvest",
        "--ray",
        env.cluster.address,
        "--store-url",
        store,
        "--target-url",
        env.upstream,
        "--upstream-api",
        "chat",
        "--runner",
        "fake",
        "--limit",
        "4",
        "--held-out",
        "0",
        "--data-dir",
        str(data),
    ]
    r = subprocess.run(
        args,
        cwd=REPO_ROOT,
        env={**os.environ, **RAY_ENV, **node_env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    (tmp_path / "harvest.log").write_text(r.stderr)  # for a failure's post-mortem
    calls = _calls_by_attempt(store)
    assert len(calls) == 4
    assert set(calls.values()) == {2}
    stats = json.loads((data / "dataset" / "stats.json").read_text())
    assert stats["sessions"] == 4
    assert stats["calls"] == 8
    # every node's proxy speaks the harvest's --upstream-api to the target (not the nodes' default)
    proxies = last_json(r.stdout)["run"]["proxies"]  # type: ignore[index]
    assert proxies
    assert {p["upstream_api"] for p in proxies} == {"chat"}
