"""Remove containers, networks and firewall rules left by dead runs (found by label)."""

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


def _dead(obj_labels: dict[str, str], run_id: str | None, everything: bool) -> bool:
    if run_id is not None and obj_labels.get(L.RUN) != run_id:
        return False
    return everything or not L.owner_alive(obj_labels.get(L.OWNER, ""))


def collect(client: docker.DockerClient, *, run_id: str | None = None, everything: bool = False) -> GcReport:
    """Remove what dead owners left; `everything` also removes what live runs hold (e.g. before CI)."""
    report = GcReport()
    # The low-level list needs no inspect per container, which races with containers being created or removed.
    for c in client.api.containers(all=True, filters={"label": L.ROOT}):
        if _dead(c.get("Labels") or {}, run_id, everything):
            try:
                client.api.remove_container(c["Id"], force=True)
            except docker.errors.NotFound:
                continue
            report.containers.append(c["Names"][0].lstrip("/"))
    for n in client.networks.list(filters={"label": L.ROOT}):
        if _dead(n.attrs.get("Labels") or {}, run_id, everything):
            try:
                n.remove()
                report.networks.append(n.name)
            except docker.errors.APIError:
                continue  # still has a live endpoint; a later gc gets it
    live = {n.name for n in client.networks.list(filters={"label": L.ROOT})}
    for table, name, spec in tagged_rules():
        if name not in live:
            delete_rule(table, spec)
            report.rules += 1
    return report
