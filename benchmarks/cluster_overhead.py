"""What Ray placement costs per session, and how fast the node uploader moves parts to an object store.

1. Scheduling overhead: the same N scripted sessions (no calls, no sleep: only the runner's own work)
   run by the local runner (`Runner` + `FakeSessionRunner`, the baseline) and through Ray
   (`Runner` + `RaySessionRunner` on a one-node local Ray cluster started here with `sandbox` slots).
   The first Ray session also starts the node's proxy and uploader (an actor): reported apart.
2. Upload throughput: K parts of S MiB uploaded by `proxy.uploader.Uploader` to a local S3-compatible
   server (moto's server mode, standing in for a real object store, which cannot be installed here),
   against a local folder as the store (the baseline, same process).

    python benchmarks/cluster_overhead.py --sessions 40 --parts 20 --part-mib 4
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from factory.db import connect, default_url, session_factory  # noqa: E402
from factory.ingest import sample  # noqa: E402
from factory.run.fake_runner import FakeSessionRunner  # noqa: E402
from factory.run.plan import PlanConfig, plan  # noqa: E402
from factory.run.runner import RunConfig, Runner  # noqa: E402
from factory.run.runner_types import FAKE  # noqa: E402
from proxy.uploader import Uploader  # noqa: E402
from records.storage import Store  # noqa: E402


def _db(root: Path) -> object:
    sessions = session_factory(connect(default_url(root)))
    sample.install(sessions, root / "sample-repos")
    plan(sessions, PlanConfig())  # 36 sessions
    return sessions


def _run(root: Path, session_runner: object, n: int, concurrency: int) -> float:
    sessions = _db(root)
    cfg = RunConfig(
        proxy_url="http://127.0.0.1:9", data_dir=root, concurrency=concurrency, limit=n, poll_s=0.05
    )
    t = time.perf_counter()
    stats = Runner(sessions, session_runner, cfg).run()  # type: ignore[arg-type]
    took = time.perf_counter() - t
    assert stats.done == n, stats
    return took


def scheduling(n: int, concurrency: int, tmp: Path) -> None:
    import ray

    from factory.run.ray_runner import SANDBOX_RESOURCE, RayOptions, RaySessionRunner

    local = _run(tmp / "local", FakeSessionRunner(), n, concurrency)
    t = time.perf_counter()
    ray.init(
        num_cpus=1,
        resources={SANDBOX_RESOURCE: concurrency},
        object_store_memory=80 * 1024 * 1024,
        include_dashboard=False,
        namespace="dflash",
        log_to_driver=False,
    )
    started = time.perf_counter() - t
    opts = RayOptions(
        address="local",
        upstream="http://127.0.0.1:9",
        store_url=str(tmp / "store"),
        node_dir=tmp / "node",
        session_runner=FAKE,
        fake_calls=0,
    )
    rr = RaySessionRunner(opts)
    warm = _run(tmp / "warm", rr, 1, 1)  # starts the node's proxy actor (its uploader a thread in it)
    steady = _run(tmp / "ray", rr, n, concurrency)
    rr.close()
    ray.shutdown()
    print(f"scheduling: {n} sessions, {concurrency} at a time")
    print(f"  local runner   {local:7.2f} s  {local / n * 1000:8.1f} ms/session (baseline)")
    print(
        f"  ray runner     {steady:7.2f} s  {steady / n * 1000:8.1f} ms/session "
        f"({steady / local:.1f}x; +{(steady - local) / n * 1000:.1f} ms/session)"
    )
    print(f"  first session on a node (proxy actor start): {warm:.2f} s; ray.init (local): {started:.2f} s")


def upload(parts: int, part_mib: float, tmp: Path) -> None:
    from tests.support.s3 import local_s3

    data = os.urandom(int(part_mib * 1024 * 1024))

    def one(store: Store, name: str) -> float:
        calls = tmp / name / "calls"
        calls.mkdir(parents=True)
        for i in range(parts):
            (calls / f"part-bench-{i:06d}.parquet").write_bytes(data)
        up = Uploader(calls, store)
        t = time.perf_counter()
        done, left = up.sweep()
        took = time.perf_counter() - t
        assert (done, left) == (parts, 0)
        return took

    folder = one(Store.from_url(tmp / "folder-store"), "a")
    with local_s3() as s3:
        s3t = one(Store.from_url(f"s3://{s3.new_bucket()}/bench"), "b")
    mib = parts * part_mib
    print(f"upload: {parts} parts x {part_mib:g} MiB = {mib:g} MiB, one uploader")
    print(
        f"  local folder   {folder:7.2f} s  {mib / folder:8.1f} MiB/s  {parts / folder:6.1f} parts/s (baseline)"
    )
    print(
        f"  local S3 (moto){s3t:7.2f} s  {mib / s3t:8.1f} MiB/s  {parts / s3t:6.1f} parts/s "
        f"({s3t / folder:.1f}x the folder's time)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--parts", type=int, default=20)
    ap.add_argument("--part-mib", type=float, default=4.0)
    a = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster: no token file left in ~/.ray
    with tempfile.TemporaryDirectory() as d:
        scheduling(a.sessions, a.concurrency, Path(d))
        upload(a.parts, a.part_mib, Path(d))


if __name__ == "__main__":
    main()
