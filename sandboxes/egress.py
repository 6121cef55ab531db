"""Controlled egress: a squid forward proxy per sandbox that reaches the package registries and nothing else.

The sandbox stays on its internal network with no resolver. Its squid container sits on that network and on
one shared, ordinary bridge network (`dflash-egress`) that NATs to the outside; squid resolves names itself
and allows only the registry domains (CONNECT to 443, plain HTTP to 80). Addresses in private ranges are
refused even when a registry name resolves to one, so the proxy cannot be used to reach the host or another
container. The sandbox's tools find squid through the usual proxy variables; each request's host and bytes
are read back from squid's access log when the session ends.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import docker
from docker.models.containers import Container

from sandboxes.containers import remove_container
from sandboxes.errors import SandboxSetupError
from sandboxes.files import read_file, tar_files
from sandboxes.images.build import _digest, _exists, build_base, build_image
from sandboxes.labels import EGRESS

SQUID_PORT = 3128
EGRESS_NETWORK = "dflash-egress"
EGRESS_LABEL = EGRESS
LOG_PATH = "/var/log/squid/egress.log"
DOCKERFILE = Path(__file__).parent / "images" / "Dockerfile.egress"
_BUILDING = threading.Lock()

# The registries a build needs: PyPI, npm (and yarn's mirror of it), crates.io, the Go module proxy and
# checksum database, Maven Central and Gradle's portal, Debian. A leading dot allows subdomains.
REGISTRIES = (
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "proxy.golang.org",
    "sum.golang.org",
    "storage.googleapis.com",
    "repo.maven.apache.org",
    "repo1.maven.org",
    "plugins.gradle.org",
    "services.gradle.org",
    "deb.debian.org",
    "security.debian.org",
)
PRIVATE = (
    "0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 169.254.0.0/16 172.16.0.0/12 192.168.0.0/16 "
    "224.0.0.0/4 240.0.0.0/4 ::1 fc00::/7 fe80::/10"
)


def squid_conf(extra_hosts: list[str] | tuple[str, ...] = ()) -> str:
    """The proxy's whole configuration: registries (public addresses only), extra hosts, nothing else.

    An extra host is `name` or `name:port` (a site's mirror on its own port).
    """
    lines = [
        f"http_port {SQUID_PORT}",
        "acl SSL_ports port 443",
        "acl Safe_ports port 80 443",
        "acl CONNECT method CONNECT",
        f"acl registries dstdomain {' '.join(REGISTRIES)}",
        f"acl private dst {PRIVATE}",
    ]
    if extra_hosts:
        names = sorted({h.rsplit(":", 1)[0] if ":" in h else h for h in extra_hosts})
        ports = sorted({80, 443} | {int(h.rsplit(":", 1)[1]) for h in extra_hosts if ":" in h})
        # A site's own mirror may well live on a private address and its own port: allowed before those checks.
        lines += [
            f"acl extra dstdomain {' '.join(names)}",
            f"acl extra_ports port {' '.join(map(str, ports))}",
            "http_access allow extra extra_ports",
        ]
    lines += ["http_access deny !Safe_ports", "http_access deny CONNECT !SSL_ports"]
    lines += [
        "http_access deny private",
        "http_access allow registries",
        "http_access deny all",
        "cache deny all",
        "cache_mem 8 MB",
        "via off",
        "forwarded_for delete",
        "shutdown_lifetime 0 seconds",
        "connect_timeout 20 seconds",
        "logformat egress %ts.%03tu %Ss/%03>Hs %rm %ru %>st %<st",
        f"access_log stdio:{LOG_PATH} egress",
        "cache_log /var/log/squid/cache.log",
        "pid_filename /run/squid.pid",
    ]
    return "\n".join(lines) + "\n"


def egress_tag(client: docker.DockerClient, base: str) -> str:
    return f"dflash-sandbox-egress:{_digest({'base': base, 'dockerfile': DOCKERFILE.read_text()})}"


def build_egress_image(client: docker.DockerClient, settings: object, log: object = None) -> str:
    """squid on the base image (Debian's package, so it builds from the host's mirror like the rest)."""
    base = build_base(client, settings, log or (lambda _m: None))  # type: ignore[arg-type]
    tag = egress_tag(client, base)
    with _BUILDING:
        if not _exists(client, tag):
            build_image(client, tag, "egress", {"BASE": base}, fileobj=io.BytesIO(DOCKERFILE.read_bytes()))
    return tag


def egress_network(client: docker.DockerClient) -> str:
    """The one shared outward network (created on first use; concurrent creators agree on one)."""
    found = client.networks.list(names=[EGRESS_NETWORK], filters={"label": EGRESS_LABEL})
    if found:
        return str(found[0].name)
    with contextlib.suppress(docker.errors.APIError):
        client.networks.create(
            EGRESS_NETWORK, driver="bridge", labels={EGRESS_LABEL: "1"}, check_duplicate=True
        )
    return EGRESS_NETWORK


@dataclass
class EgressHit:
    """One request through the proxy: when, squid's verdict, method, host and bytes each way."""

    time: float
    status: str
    method: str
    host: str
    bytes_in: int
    bytes_out: int

    @property
    def allowed(self) -> bool:
        return "DENIED" not in self.status


def parse_log(text: str) -> list[EgressHit]:
    hits = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 6:
            continue
        ts, status, method, url, sent, received = parts
        if method == "-":  # a connection that sent no request (the readiness probe)
            continue
        # CONNECT logs `host:port`; plain HTTP logs the whole URL.
        host = urlsplit(url).hostname if "://" in url else url.rsplit(":", 1)[0]
        hits.append(EgressHit(float(ts), status, method, host or url, int(received), int(sent)))
    return hits


class EgressProxy:
    """The squid of one sandbox; `start` before the sandbox's container, `close` after it."""

    def __init__(self, client: docker.DockerClient, image: str, name: str, labels: dict[str, str]) -> None:
        self.client, self.image, self.name, self.labels = client, image, f"{name}-egress", labels
        self.container: Container | None = None
        self.address = ""

    def start(self, sandbox_network: str, extra_hosts: list[str], timeout: float = 30.0) -> str:
        outward = egress_network(self.client)
        self.container = self.client.containers.create(
            self.image,
            command=["squid", "-N", "-f", "/etc/squid/egress.conf"],
            name=self.name,
            labels=self.labels,
            network=outward,
            init=True,
            mem_limit="256m",
            cap_drop=["NET_RAW", "MKNOD", "SYS_ADMIN"],
        )
        conf = tar_files({"etc/squid/egress.conf": squid_conf(extra_hosts)}, 0, mode=0o644)
        self.container.put_archive("/", conf)
        self.client.networks.get(sandbox_network).connect(self.container)
        self.container.start()
        self.container.reload()
        nets = self.container.attrs["NetworkSettings"]["Networks"]
        self.address = nets[sandbox_network]["IPAddress"]
        self._wait(nets[outward]["IPAddress"], timeout)
        return self.address

    def _wait(self, host_side: str, timeout: float) -> None:
        # The host reaches squid on the outward network; the sandbox cannot get there.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((host_side, SQUID_PORT), timeout=1):
                return
            time.sleep(0.2)
        raise SandboxSetupError(f"egress proxy did not listen within {timeout:.0f} s: {self._logs()}")

    def _logs(self) -> str:
        if self.container is None:
            return ""
        return self.container.logs(tail=20).decode(errors="replace")

    @property
    def url(self) -> str:
        return f"http://{self.address}:{SQUID_PORT}"

    def env(self, no_proxy: str) -> dict[str, str]:
        """Proxy variables for tools inside (pip, npm, go, cargo, curl, git read both spellings)."""
        env = {"NO_PROXY": no_proxy, "no_proxy": no_proxy}
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[key] = self.url
        # The JVM (Maven, Gradle) reads no proxy variables, only its own system properties.
        skip = "|".join(no_proxy.split(","))
        env["JAVA_TOOL_OPTIONS"] = (
            " ".join(
                f"-D{scheme}.proxyHost={self.address} -D{scheme}.proxyPort={SQUID_PORT}"
                for scheme in ("http", "https")
            )
            + f" -Dhttp.nonProxyHosts={skip}"
        )
        return env

    def hits(self) -> list[EgressHit]:
        if self.container is None:
            return []
        try:
            log = read_file(self.container, LOG_PATH)
        except (docker.errors.APIError, SandboxSetupError):  # no log yet, or not a regular file
            return []
        return parse_log(log.decode(errors="replace"))

    def close(self) -> list[str]:
        errors = remove_container(self.container, "egress container")
        self.container = None
        return errors
