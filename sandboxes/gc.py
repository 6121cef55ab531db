"""Remove the sandboxes dead owners left: containers, networks and firewall rules, found by label and owner
liveness. A factory run's processes, ledger and spool are the factory's to reap (`factory/run/reap.py`), which
calls `collect` for the sandboxes of a dead run."""

from __future__ import annotations

from dataclasses import dataclass, field

import docker

from sandboxes import labels as L
from sandboxes.network import delete_rule, tagged_rules


@dataclass
class GcReport:
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    rules: int = 0

    def empty(self) -> bool:
        return not (self.containers or self.networks or self.rules)

    def lines(self, verb: str = "removed") -> list[str]:
        out = [f"{verb} container {c}" for c in self.containers]
        out += [f"{verb} network {n}" for n in self.networks]
        return out + ([f"{verb} {self.rules} firewall rule(s)"] if self.rules else [])

    def merge(self, other: GcReport) -> None:
        self.containers += other.containers
        self.networks += other.networks
        self.rules += other.rules


def _dead(obj_labels: dict[str, str], run_id: str | None, everything: bool) -> bool:
    if run_id is not None and obj_labels.get(L.RUN) != run_id:
        return False
    return everything or not L.owner_alive(obj_labels.get(L.OWNER, ""))


def collect(
    client: docker.DockerClient,
    *,
    run_id: str | None = None,
    everything: bool = False,
    dry_run: bool = False,
) -> GcReport:
    """Remove what dead owners left; `everything` also removes what live runs hold (e.g. before CI);
    `dry_run` only lists it."""
    report = GcReport()
    # The low-level list needs no inspect per container, which races with containers being created or removed.
    for c in client.api.containers(all=True, filters={"label": L.ROOT}):
        if _dead(c.get("Labels") or {}, run_id, everything):
            if not dry_run:
                try:
                    client.api.remove_container(c["Id"], force=True)
                except docker.errors.NotFound:
                    continue
            report.containers.append(c["Names"][0].lstrip("/"))
    doomed: set[str] = set()
    for n in client.networks.list(filters={"label": L.ROOT}):
        if _dead(n.attrs.get("Labels") or {}, run_id, everything):
            doomed.add(n.name)
            if dry_run:
                report.networks.append(n.name)
                continue
            try:
                n.remove()
                report.networks.append(n.name)
            except docker.errors.APIError:
                continue  # still has a live endpoint; a later gc gets it
    # Rules are listed before the networks: a sandbox inserts its rules after creating its network, so a
    # rule whose network is missing from the later list is an orphan, never one of a sandbox being set up.
    rules = tagged_rules()
    live = {n.name for n in client.networks.list(filters={"label": L.ROOT})}
    for table, name, spec in rules:
        if name in live and not (dry_run and name in doomed):
            continue  # a rule's comment names its network: it goes with that network
        if not dry_run:
            delete_rule(table, spec)
        report.rules += 1
    return report
