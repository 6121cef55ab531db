"""Confinement: an internal Docker network per sandbox plus host firewall rules.

`internal=True` stops forwarding off the bridge, but a container can still reach every service bound on the
host's bridge address (and DNS through the host). INPUT rules on the bridge interface drop everything but
the relay's port, so the sandbox reaches the proxy and nothing else.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

import docker
from docker.models.networks import Network

RULE_TAG = "dflash-sandbox"


def _tables() -> list[str]:
    return [t for t in ("iptables", "ip6tables") if shutil.which(t)]


def _run(args: list[str]) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


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
    network: Network | None = None
    gateway: str = ""
    _rules: list[tuple[str, list[str]]] = field(default_factory=list)

    def create(self) -> str:
        """Create the network; return the gateway address (the host's side of the bridge)."""
        self.network = self.client.networks.create(
            self.name,
            driver="bridge",
            internal=True,
            labels=self.labels,
            options={"com.docker.network.bridge.name": self.bridge},
        )
        self.network.reload()
        self.gateway = self.network.attrs["IPAM"]["Config"][0]["Gateway"].split("/")[0]
        # Drop all input from the bridge now; the relay's port is opened by `allow`.
        for table in _tables():
            self._insert(table, ["-i", self.bridge, "-j", "DROP"])
        return self.gateway

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
