"""Confinement: an internal Docker network per sandbox plus host firewall rules.

`internal=True` stops forwarding off the bridge, but a container can still reach every service bound on the
host's bridge address (and DNS through the host). INPUT rules on the bridge interface drop everything but
the relay's port, so the sandbox reaches the proxy and nothing else.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.models.networks import Network
from docker.types import IPAMConfig, IPAMPool

from sandboxes.errors import SandboxSetupError

RULE_TAG = "dflash-sandbox"


def _tables() -> list[str]:
    return [t for t in ("iptables", "ip6tables") if shutil.which(t)]


def _run(args: list[str]) -> None:
    res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode != 0:
        # Keep the message: "Permission denied (you must be root)" is the usual one.
        raise SandboxSetupError(f"{' '.join(args[:2])} failed: {res.stderr.strip()}")


def _taken_subnets(client: docker.DockerClient) -> list[ipaddress.IPv4Network]:
    """Subnets of existing Docker networks and of the host's own routes."""
    taken = []
    for net in client.api.networks():
        for cfg in (net.get("IPAM") or {}).get("Config") or []:
            sub = cfg.get("Subnet", "")
            if sub and ":" not in sub:
                taken.append(ipaddress.IPv4Network(sub, strict=False))
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        dest, mask = line.split()[1], line.split()[7]
        if int(mask, 16):  # the default route (mask 0) overlaps everything and blocks nothing
            taken.append(ipaddress.IPv4Network(f"{_route_ip(dest)}/{_route_ip(mask)}", strict=False))
    return taken


def _route_ip(hex_le: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int.from_bytes(bytes.fromhex(hex_le), "little"))


def free_subnets(client: docker.DockerClient, pool: str, prefix: int) -> Iterator[ipaddress.IPv4Network]:
    """Free subnets of `pool`, from a random start so concurrent runs rarely race for the same one."""
    taken = _taken_subnets(client)
    subnets = list(ipaddress.IPv4Network(pool).subnets(new_prefix=prefix))
    start = random.randrange(len(subnets))
    for sub in subnets[start:] + subnets[:start]:
        if not any(sub.overlaps(t) for t in taken):
            yield sub


def rule_comment(network_name: str) -> str:
    return f"{RULE_TAG}:{network_name}"


def tagged_rules() -> list[tuple[str, str, str]]:
    """(table binary, network name, `-A INPUT ...` spec) for every rule this layer added."""
    found = []
    for table in _tables():
        out = subprocess.run([table, "-w", "-S", "INPUT"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if f'"{RULE_TAG}:' in line or f" {RULE_TAG}:" in line:
                name = line.split(f"{RULE_TAG}:", 1)[1].split()[0].strip('"')
                found.append((table, name, line))
    return found


def delete_rule(table: str, spec: str) -> None:
    # `-S` prints rules as `-A INPUT ...`; the same words with -D delete exactly that rule.
    import shlex

    words = shlex.split(spec)
    subprocess.run([table, "-w", "-D", *words[1:]], capture_output=True, text=True)


@dataclass
class ConfinedNetwork:
    client: docker.DockerClient
    name: str
    bridge: str
    labels: dict[str, str]
    subnet_pool: str | None = None
    subnet_prefix: int = 28
    network: Network | None = None
    gateway: str = ""
    _rules: list[tuple[str, list[str]]] = field(default_factory=list)

    def create(self) -> str:
        """Create the network; return the gateway address (the host's side of the bridge)."""
        self.network = self._create_network()
        self.network.reload()
        self.gateway = self.network.attrs["IPAM"]["Config"][0]["Gateway"].split("/")[0]
        # Drop all input from the bridge now; the relay's port is opened by `allow`.
        if shutil.which("iptables") is None:
            raise SandboxSetupError("iptables is required to confine sandboxes (apt-get install iptables)")
        self._insert("iptables", ["-i", self.bridge, "-j", "DROP"])
        if shutil.which("ip6tables"):
            # Without IPv6 in the kernel this fails; the container has IPv6 disabled anyway.
            with contextlib.suppress(RuntimeError):
                self._insert("ip6tables", ["-i", self.bridge, "-j", "DROP"])
        return self.gateway

    def _create_network(self) -> Network:
        kwargs = {
            "driver": "bridge",
            "internal": True,
            "labels": self.labels,
            "options": {"com.docker.network.bridge.name": self.bridge},
        }
        if not self.subnet_pool:
            return self.client.networks.create(self.name, **kwargs)
        for attempt, sub in enumerate(free_subnets(self.client, self.subnet_pool, self.subnet_prefix)):
            pool = IPAMPool(subnet=str(sub), gateway=str(sub.network_address + 1))
            try:
                return self.client.networks.create(self.name, ipam=IPAMConfig(pool_configs=[pool]), **kwargs)
            except docker.errors.APIError as exc:
                # Another run took the same subnet a moment ago: try the next one.
                if "overlap" not in str(exc).lower() or attempt >= 20:
                    raise
        raise SandboxSetupError(
            f"no free /{self.subnet_prefix} left in {self.subnet_pool}; set DFLASH_SANDBOX_SUBNET_POOL"
        )

    def allow(self, port: int) -> None:
        self._insert(
            "iptables",
            ["-i", self.bridge, "-d", self.gateway, "-p", "tcp", "--dport", str(port), "-j", "ACCEPT"],
        )

    def _insert(self, table: str, rule: list[str]) -> None:
        rule = [*rule, "-m", "comment", "--comment", rule_comment(self.name)]
        _run([table, "-w", "-I", "INPUT", "1", *rule])
        self._rules.append((table, rule))

    def remove(self) -> list[str]:
        """Remove rules and network; return the errors (teardown goes on past each)."""
        errors = []
        for table, rule in reversed(self._rules):
            res = subprocess.run([table, "-w", "-D", "INPUT", *rule], capture_output=True, text=True)
            if res.returncode != 0:
                errors.append(f"{table}: {res.stderr.strip()}")
        self._rules.clear()
        if self.network is not None:
            try:
                self.network.remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                errors.append(f"network {self.name}: {exc}")
            self.network = None
        return errors
