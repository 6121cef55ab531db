"""Remove what dead runs left: containers, networks and firewall rules (found by label and owner
liveness), and, for a data folder, the processes its dead runs recorded in their ledgers (then their
proxy's spool is rolled into Parquet, so no recorded call is lost)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

from sandboxes import labels as L
from sandboxes.ledger import RunLedger, dead_ledgers, ledger_dir, process_alive, stop_process
from sandboxes.network import delete_rule, tagged_rules


@dataclass
class GcReport:
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    rules: int = 0
    processes: list[str] = field(default_factory=list)  # "proxy (pid 123)"
    ledgers: list[str] = field(default_factory=list)  # run ids whose ledger was closed
    spool_rolled: str | None = None  # the roller's own summary line
    notes: list[str] = field(default_factory=list)  # what could not be reaped now, and why

    def empty(self) -> bool:
        return not (self.containers or self.networks or self.rules or self.processes or self.ledgers)

    def lines(self, verb: str = "removed") -> list[str]:
        out = [f"{verb} container {c}" for c in self.containers]
        out += [f"{verb} network {n}" for n in self.networks]
        out += [f"{verb} {self.rules} firewall rule(s)"] if self.rules else []
        out += [f"{'stopped' if verb == 'removed' else 'would stop'} {p}" for p in self.processes]
        out += [f"dead run {r}: ledger {'closed' if verb == 'removed' else 'to close'}" for r in self.ledgers]
        out += [f"spool: {self.spool_rolled}"] if self.spool_rolled else []
        return out + self.notes

    def merge(self, other: GcReport) -> None:
        self.containers += other.containers
        self.networks += other.networks
        self.rules += other.rules
        self.processes += other.processes
        self.ledgers += other.ledgers
        self.spool_rolled = other.spool_rolled or self.spool_rolled
        self.notes += other.notes


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


def roll_spool(data_dir: Path) -> str:
    """Roll every spool segment no live proxy holds (`python -m proxy roll`, run as a program: the proxy
    owns its spool format)."""
    r = subprocess.run(
        [sys.executable, "-m", "proxy", "roll", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout.strip()


def reap_data_dir(
    data_dir: Path,
    client: Callable[[], docker.DockerClient] | None = None,
    *,
    dry_run: bool = False,
) -> GcReport:
    """Reap what the dead runs recorded under `data_dir` left on this host; live runs are never touched.
    `client` is called only when a dead run had sandboxes (a run without them needs no Docker engine)."""
    report = GcReport()
    dead = dead_ledgers(data_dir)
    for path, rec in dead:
        for proc in rec.processes:
            if process_alive(proc) and (dry_run or stop_process(proc)):
                report.processes.append(f"{proc.name} (pid {proc.pid})")
        if rec.sandboxes and client is not None:
            try:
                found = collect(client(), run_id=rec.run_id, dry_run=dry_run)
            except (RuntimeError, docker.errors.DockerException) as exc:
                # No engine now (e.g. not yet started after a reboot): keep the ledger for a later reap.
                report.notes.append(f"dead run {rec.run_id}: sandboxes not reaped: {exc}")
                continue
            report.containers += found.containers
            report.networks += found.networks
            report.rules += found.rules
        report.ledgers.append(rec.run_id)
        if not dry_run:
            path.unlink(missing_ok=True)
    spool = data_dir / "spool"
    segments = sorted(spool.glob("*.spool")) if spool.is_dir() else []
    if dry_run:
        report.spool_rolled = f"{len(segments)} segment(s) to roll" if segments else None
    elif segments:
        report.spool_rolled = roll_spool(data_dir)
    return report


def watch(
    data_dir: Path,
    run_id: str,
    client: Callable[[], docker.DockerClient] | None = None,
    *,
    poll_s: float = 2.0,
) -> GcReport | None:
    """Outlive run `run_id` just long enough to reap what it leaves when it dies (a kill -9 leaves its
    sandboxes running until someone removes them); None when the run ended cleanly (ledger closed)."""
    path = ledger_dir(data_dir) / f"{run_id}.json"
    while True:
        try:
            rec = RunLedger.model_validate_json(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            rec = None  # unreadable for a moment: look again
        if rec is not None and not L.owner_alive(rec.owner):
            return reap_data_dir(data_dir, client)
        time.sleep(poll_s)
