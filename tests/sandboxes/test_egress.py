"""With `--egress registries` a sandbox reaches the package registries through its squid and nothing else:
not the host, not DNS, not another sandbox, not the proxy's outward side, not a host off the allow-list.

PyPI is the registry reached for real (this machine reaches it); example.com is the non-registry host, and
the test asserts the *proxy's* refusal (403 from squid), not a resolver failure in the sandbox.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes.agents import AGENTS
from sandboxes.config import SandboxSettings
from sandboxes.egress import EGRESS_NETWORK, SQUID_PORT, build_egress_image
from sandboxes.sandbox import Sandbox, SandboxSpec
from sandboxes.session import run_session
from tests.sandboxes import probes
from tests.sandboxes.sessions import NO_MODEL, check_result, scripted_request

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def egress_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    return build_egress_image(docker_client, SandboxSettings())


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP service on every host address: what a sandbox must not reach, directly or through squid."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = server.accept()
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nsecret")
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def _spec(run_id: str, name: str, repo: tuple[Path, str], image: str, egress: str) -> SandboxSpec:
    settings = SandboxSettings(egress="registries", wall_time_s=300)
    return SandboxSpec(run_id, name, repo[0], repo[1], NO_MODEL, image, settings, egress_image=egress)


def _ip(box: Sandbox) -> str:
    assert box.container is not None
    box.container.reload()
    return str(box.container.attrs["NetworkSettings"]["Networks"][box.name]["IPAddress"])


def test_registries_only_through_the_proxy(  # type: ignore[no-untyped-def]
    docker_client, agents_image: str, egress_image: str, repo, run_id: str, host_listener: int
) -> None:
    with (
        Sandbox(_spec(run_id, "a", repo, agents_image, egress_image), docker_client) as a,
        Sandbox(_spec(run_id, "b", repo, agents_image, egress_image), docker_client) as b,
    ):
        assert a.egress is not None
        # The registry, through squid.
        pypi = probes.http_get(a, "https://pypi.org/simple/six/")
        assert pypi["ok"], pypi
        assert pypi["status"] == 200
        # A host off the list: squid answers 403 (the sandbox itself resolves nothing).
        other = probes.http_get(a, "https://example.com/")
        assert not other["ok"]
        assert "403" in str(other["error"]), other
        assert not probes.resolve(a, "pypi.org")["ok"]
        # The host: neither directly (its own bridge's gateway is firewalled; NO_PROXY names it, since the
        # model proxy's relay lives there) nor through squid at the host's address on the egress network.
        gateway = a.net.gateway
        assert not probes.connect(a, gateway, host_listener)["ok"]
        assert not probes.http_get(a, f"http://{gateway}:{host_listener}/")["ok"]
        outward_net = docker_client.networks.get(EGRESS_NETWORK)
        host_outward = outward_net.attrs["IPAM"]["Config"][0]["Gateway"].split("/")[0]
        assert not probes.connect(a, host_outward, host_listener)["ok"]
        via = probes.http_get(a, f"http://{host_outward}:{host_listener}/")
        assert not via["ok"]
        assert "403" in str(via["error"]), via
        # Another sandbox: its server answers inside it, not to `a`, directly or through squid.
        assert b.container is not None
        b.container.exec_run(["python3", "-m", "http.server", "8000"], user="agent", detach=True)
        deadline = time.monotonic() + 20
        while (
            not (mine := probes.http_get(b, "http://127.0.0.1:8000/"))["ok"] and time.monotonic() < deadline
        ):
            time.sleep(0.3)
        assert mine["ok"], mine
        assert not probes.connect(a, _ip(b), 8000)["ok"]
        assert "403" in str(probes.http_get(a, f"http://{_ip(b)}:8000/")["error"])
        # squid's outward side (the shared egress network) is out of reach too.
        assert a.egress.container is not None
        a.egress.container.reload()
        outward = a.egress.container.attrs["NetworkSettings"]["Networks"][EGRESS_NETWORK]["IPAddress"]
        assert not probes.connect(a, outward, SQUID_PORT)["ok"]
        # The session's log: host and bytes of each request, allowed or not.
        hits = a.egress.hits()
        allowed = {h.host for h in hits if h.allowed}
        denied = {h.host for h in hits if not h.allowed}
        assert allowed == {"pypi.org"}, hits
        assert {"example.com", host_outward, _ip(b)} <= denied, hits
        assert next(h for h in hits if h.host == "pypi.org").bytes_in > 1000
        # b made no request through its own squid.
        assert b.egress is not None
        assert b.egress.hits() == []
    assert not docker_client.containers.list(all=True, filters={"label": f"dflash.sandbox.run={run_id}"})


@pytest.mark.cli
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_each_agent_reaches_the_model_with_egress_on(  # type: ignore[no-untyped-def]
    agent: str, docker_client, agents_image: str, egress_image: str, proxy_server, repo, run_id: str
) -> None:
    """The proxy variables must not capture the model's traffic: NO_PROXY names the relay's gateway."""
    settings = SandboxSettings(egress="registries")
    req = scripted_request(
        agent,
        repo,
        proxy_server[0],
        agents_image,
        run_id=run_id,
        time_limit_s=240,
        settings=settings,
        egress_image=egress_image,
    )
    result = run_session(req, docker_client)
    check_result(result)
    # Not one request for the model went to squid (it would be refused there: a private address).
    pool = ipaddress.ip_network(settings.subnet_pool or "172.31.0.0/16")
    to_sandbox_nets = [h for h in result.egress if _ip_in(h["host"], pool)]
    assert to_sandbox_nets == [], result.egress


def _ip_in(host: str, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(host) in net
    except ValueError:  # a name
        return False
