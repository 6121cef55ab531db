"""Reap what the dead runs of a data folder left on this host: the processes their ledgers recorded, their
sandboxes (containers, networks, firewall rules, by the run-id label: `sandboxes.gc.collect`), their ledgers,
and then the spool their proxy left, rolled into Parquet so no recorded call is lost. Live runs are never
touched: only what a dead owner recorded, or labelled with its run id, is removed."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

from factory.run.ledger import RunLedger, dead_ledgers, ledger_dir, process_alive, stop_process
from proxy.roller import roll_data_dir
from proxy.spool import SEGMENT_SUFFIX
from sandboxes.gc import GcReport, collect
from sandboxes.labels import owner_alive


@dataclass
class ReapReport(GcReport):
    """The sandboxes removed (`GcReport`) and what else the dead runs left."""

    processes: list[str] = field(default_factory=list)  # "proxy (pid 123)"
    ledgers: list[str] = field(default_factory=list)  # run ids whose ledger was closed
    spool_rolled: str | None = None  # the roller's own summary line
    notes: list[str] = field(default_factory=list)  # what could not be reaped now, and why

    def empty(self) -> bool:
        return super().empty() and not (self.processes or self.ledgers)

    def lines(self, verb: str = "removed") -> list[str]:
        out = super().lines(verb)
        out += [f"{'stopped' if verb == 'removed' else 'would stop'} {p}" for p in self.processes]
        out += [f"dead run {r}: ledger {'closed' if verb == 'removed' else 'to close'}" for r in self.ledgers]
        out += [f"spool: {self.spool_rolled}"] if self.spool_rolled else []
        return out + self.notes


def _reap_run(
    rec: RunLedger, client: Callable[[], docker.DockerClient] | None, report: ReapReport, dry_run: bool
) -> bool:
    """Stop one dead run's processes and remove its sandboxes; False when its ledger must stay for later."""
    for proc in rec.processes:
        if process_alive(proc) and (dry_run or stop_process(proc)):
            report.processes.append(f"{proc.name} (pid {proc.pid})")
    if rec.sandboxes and client is not None:
        try:
            found = collect(client(), run_id=rec.run_id, dry_run=dry_run)
        except (RuntimeError, docker.errors.DockerException) as exc:
            # No engine now (e.g. not yet started after a reboot): keep the ledger for a later reap.
            report.notes.append(f"dead run {rec.run_id}: sandboxes not reaped: {exc}")
            return False
        report.merge(found)
    return True


def reap_data_dir(
    data_dir: Path,
    client: Callable[[], docker.DockerClient] | None = None,
    *,
    dry_run: bool = False,
) -> ReapReport:
    """Reap what the dead runs recorded under `data_dir` left on this host; live runs are never touched.
    `client` is called only when a dead run had sandboxes (a run without them needs no Docker engine)."""
    report = ReapReport()
    for path, rec in dead_ledgers(data_dir):
        if not _reap_run(rec, client, report, dry_run):
            continue
        report.ledgers.append(rec.run_id)
        if not dry_run:
            path.unlink(missing_ok=True)
    spool = data_dir / "spool"
    segments = sorted(spool.glob(f"*{SEGMENT_SUFFIX}")) if spool.is_dir() else []
    if dry_run:
        report.spool_rolled = f"{len(segments)} segment(s) to roll" if segments else None
    elif segments:
        report.spool_rolled = roll_data_dir(data_dir)
    return report


def watch(
    data_dir: Path,
    run_id: str,
    client: Callable[[], docker.DockerClient] | None = None,
    *,
    poll_s: float = 2.0,
) -> ReapReport | None:
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
        if rec is not None and not owner_alive(rec.owner):
            return reap_data_dir(data_dir, client)
        time.sleep(poll_s)
