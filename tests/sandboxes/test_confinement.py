"""Confinement, proven from inside a sandbox: the proxy answers; DNS, other host ports and the outside do not."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from sandboxes.config import SandboxSettings
from sandboxes.images.mirror import parse_sources
from sandboxes.sandbox import Sandbox, SandboxSpec
from tests.sandboxes import probes
from tests.sandboxes.conftest import leftovers

pytestmark = pytest.mark.docker


@pytest.fixture
def box(docker_client, agents_image, proxy_server, repo, run_id) -> Iterator[Sandbox]:  # type: ignore[no-untyped-def]
    path, base = repo
    spec = SandboxSpec(run_id, "confine-1", path, base, proxy_server[0], agents_image, SandboxSettings())
    with Sandbox(spec, docker_client) as sandbox:
        yield sandbox
    assert leftovers(docker_client, run_id) == {"containers": [], "networks": [], "rules": []}


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP service on every host address (as a careless local service would be)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))
    server.listen(8)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield int(server.getsockname()[1])
    server.close()


def test_the_proxy_answers_through_the_sandbox_url(box: Sandbox) -> None:
    got = probes.http_get(box, f"{box.proxy_url}/healthz")
    assert got["ok"], got
    assert got["status"] == 200, got
    assert '"status":"ok"' in str(got["body"]).replace(" ", "")


def test_another_host_port_is_closed_from_inside_but_open_from_the_host(
    box: Sandbox, host_listener: int
) -> None:
    gateway = box.net.gateway
    socket.create_connection((gateway, host_listener), timeout=3).close()  # the service is there...
    got = probes.connect(box, gateway, host_listener)
    assert not got["ok"], f"sandbox reached host port {host_listener}: {got}"  # ...but not for the sandbox
    # And the proxy relay's own port on the same address stays open.
    assert probes.connect(box, gateway, urlsplit(box.proxy_url).port or 80)["ok"]


def test_dns_fails_inside(box: Sandbox) -> None:
    mirror_host = _image_mirror_host(box)
    got = probes.resolve(box, mirror_host)
    assert not got["ok"], f"sandbox resolved {mirror_host}: {got}"
    # Nor can it ask a resolver itself: the host's port 53 on the bridge is dropped too.
    assert not probes.connect(box, box.net.gateway, 53)["ok"]


def test_an_outside_host_is_unreachable_from_inside(box: Sandbox) -> None:
    """The package mirror named by the image's own apt sources: the one outside host these machines reach."""
    mirror = urlsplit(_image_mirror(box))
    port = mirror.port or (443 if mirror.scheme == "https" else 80)
    addrs = sorted({a[4][0] for a in socket.getaddrinfo(mirror.hostname, port, socket.AF_INET)})
    reachable = [a for a in addrs if _host_can_connect(a, port)]
    assert reachable, f"the host itself cannot reach {mirror.hostname}; the test proves nothing"
    got = probes.connect(box, reachable[0], port)
    assert not got["ok"], f"sandbox reached {mirror.hostname} ({reachable[0]}:{port}): {got}"


def test_runs_as_non_root_with_limits(box: Sandbox, docker_client) -> None:  # type: ignore[no-untyped-def]
    assert box.exec(["id", "-u"]).stdout.decode().strip() == "1000"
    assert box.container is not None
    host = docker_client.api.inspect_container(box.container.id)["HostConfig"]
    s = box.settings
    assert host["NanoCpus"] == int(s.cpus * 1e9)
    assert host["PidsLimit"] == s.pids
    assert host["Memory"] == host["MemorySwap"] > 0, "memory limit with no swap on top"


def _image_mirror(box: Sandbox) -> str:
    res = box.exec(
        ["sh", "-c", "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null"], user="root"
    )
    mirrors = parse_sources(res.stdout.decode())
    assert mirrors, f"the image names no apt mirror: {res.stdout!r}"
    return mirrors[0]


def _image_mirror_host(box: Sandbox) -> str:
    host = urlsplit(_image_mirror(box)).hostname
    assert host
    return host


def _host_can_connect(addr: str, port: int) -> bool:
    try:
        socket.create_connection((addr, port), timeout=5).close()
        return True
    except OSError:
        return False


def test_the_firewall_is_what_closes_the_host_port(box: Sandbox, host_listener: int) -> None:
    """An internal network alone leaves host services open: lift our drop for one port and it is reachable."""
    rule = ["INPUT", "-i", box.net.bridge, "-p", "tcp", "--dport", str(host_listener), "-j", "ACCEPT"]
    subprocess.run(["iptables", "-w", "-I", *rule[:1], "1", *rule[1:]], check=True)
    try:
        assert probes.connect(box, box.net.gateway, host_listener)["ok"]
    finally:
        subprocess.run(["iptables", "-w", "-D", *rule], check=True)
    assert not probes.connect(box, box.net.gateway, host_listener)["ok"]


def test_more_sandbox_networks_than_dockers_default_pools_allow(docker_client, run_id) -> None:  # type: ignore[no-untyped-def]
    """Docker's default pools hold about 30 networks; sandboxes take /28s from their own pool instead."""
    from sandboxes.labels import labels
    from sandboxes.network import ConfinedNetwork

    settings = SandboxSettings()
    nets = []
    try:
        for i in range(34):
            net = ConfinedNetwork(
                docker_client,
                f"dflash-sbx-{run_id}-{i}",
                f"dft{run_id[-6:]}{i:02d}",
                labels(run_id, f"net-{i}"),
                settings.subnet_pool,
                settings.subnet_prefix,
            )
            nets.append(net)
            net.create()
        assert len({n.gateway for n in nets}) == 34
    finally:
        errors = [e for n in nets for e in n.remove()]
    assert errors == []
    assert leftovers(docker_client, run_id) == {"containers": [], "networks": [], "rules": []}
