"""A node that dies mid-session leaves its sandboxes running on its Docker engine; when the node comes back
and its proxy starts (the first session placed there), those containers are reaped — and nothing of a live
owner is touched.

What is real: a Ray cluster on this machine (a head and nodes started with `ray start`), the Docker engine,
the node proxy actor of `factory.run.ray_node` (a real `python -m proxy serve`). What stands in: the
session's sandbox is one cheap container of the base image (`sleep`), created inside a Ray task on the
doomed node with the labels `sandboxes.labels.labels` gives every sandbox — so its owner is that node's
Ray worker, exactly as for a sandbox a session task starts; a real agent session would take minutes here.
The store is a local folder (the proxy needs one; nothing is uploaded in this test)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandboxes import labels as L
from sandboxes.config import SandboxSettings
from sandboxes.images.build import build_base
from tests.cluster.ray_cluster import RAY_ENV, RayCluster
from tests.support import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.docker]

# A Ray task on the node declaring `doomed`: a labelled container owned by that node's worker process.
MAKE = """
import sys, docker, ray
from sandboxes.labels import labels
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=0, resources={"doomed": 1})
def sandbox(image):
    c = docker.from_env().containers.run(image, ["sleep", "600"], detach=True,
                                         labels=labels("ray-comeback-test", "s-doomed"))
    return c.id

print("RESULT", ray.get(sandbox.remote(sys.argv[2])))
"""

# A Ray task on the node declaring `comeback`: the first session there starts the node's proxy.
COME_BACK = """
import sys, ray
from factory.run import ray_node
from factory.run.ray_runner import RayOptions
ray.init(address=sys.argv[1], namespace=ray_node.NAMESPACE, log_to_driver=False)
opts = RayOptions(address=sys.argv[1], upstream="http://127.0.0.1:9", store_url=sys.argv[2],
                  node_dir=sys.argv[3]).node_opts()

@ray.remote(num_cpus=0, resources={"comeback": 1})
def first_session(opts):
    proxy = ray_node.node_proxy(opts, "comeback-test")
    ray.get(proxy.address.remote())
    return ray.get_runtime_context().get_node_id()

node = ray.get(first_session.remote(opts))
actor = ray.get_actor(f"comeback-test-{node}", namespace=ray_node.NAMESPACE)
print("RESULT", ray.get(actor.shutdown.remote(), timeout=120)["exit"])
ray.kill(actor)
"""


def _driver(code: str, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **RAY_ENV},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    # Ray prints its own warnings on stdout too ("raylet has lagging heartbeats" on a busy machine): the
    # driver's answer is the line it marks, wherever it falls.
    results = [line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert results, r.stdout[-4000:]
    return results[-1]


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    c = RayCluster(tmp_path_factory.mktemp("rc"))  # a short path: Ray's sockets live under it (107 bytes)
    try:
        c.start_head(sandboxes=0)
        yield c
    finally:
        c.stop()


def _base_image(docker_client: Any) -> str:
    # Any image with `sleep` would do; the sandboxes' base is built here when this runs first (a fresh CI
    # machine runs tests/cluster before tests/sandboxes), never skipped.
    return build_base(docker_client, SandboxSettings(), log=lambda _: None)


def test_a_returning_node_reaps_the_sandboxes_of_its_dead_workers(
    cluster: RayCluster, docker_client: Any, tmp_path: Path
) -> None:
    image = _base_image(docker_client)
    doomed = cluster.add_node(sandboxes=1, name="doomed", doomed=1)
    cluster.wait_nodes(2)
    orphan = _driver(MAKE, cluster.address, image)
    # A container of a live owner (this test process) on the same engine: the reap must leave it alone.
    alive = docker_client.containers.run(
        image, ["sleep", "600"], detach=True, labels=L.labels("ray-comeback-test", "s-alive")
    )
    try:
        doomed.kill()  # the host dies mid-session: its worker is gone, its sandbox keeps running
        cluster.nodes.remove(doomed)
        labels = docker_client.api.inspect_container(orphan)["Config"]["Labels"]
        assert not L.owner_alive(labels[L.OWNER])
        assert docker_client.api.inspect_container(orphan)["State"]["Running"]

        cluster.add_node(sandboxes=1, name="comeback", comeback=1)  # the host is back
        cluster.wait_nodes(2)
        exits = _driver(COME_BACK, cluster.address, str(tmp_path / "store"), str(tmp_path / "node"))
        assert "proxy" in exits

        assert not docker_client.containers.list(all=True, filters={"id": orphan})  # reaped
        alive.reload()
        assert alive.status == "running"  # a live owner's sandbox is never touched
    finally:
        alive.remove(force=True)
        for c in docker_client.containers.list(all=True, filters={"id": orphan}):
            c.remove(force=True)
