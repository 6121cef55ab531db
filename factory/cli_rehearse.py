"""`python -m factory rehearse`: the seed's campaign rehearsed with the scripted brain (docs/factory.md)."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from factory.cli_common import console, options_command
from factory.rehearse import report as rehearsal_report
from factory.rehearse.options import RehearseOptions
from factory.rehearse.supervisor import run as run_rehearsal


@options_command(RehearseOptions)
def rehearse(settings: RehearseOptions) -> None:
    """Plan the seed's campaign (17,615 issues × EN/KO × 3 agents ≈ 103k sessions) in the queue, run --sessions
    of them through the real queue, runner processes, proxies and spool with the scripted brain and the
    rehearsal agent (no Docker), with --fault injected, then export; report.json and report.png in
    DATA_DIR/report/. Exits 1 when an acknowledged call was lost or a session completed twice."""
    try:
        report = run_rehearsal(settings, lambda line: console.print(line, markup=False, soft_wrap=True))
    except (RuntimeError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    path = rehearsal_report.write(report, settings.report_dir)
    derived = report["derived"]
    t = Table(title=f"rehearsal: {path} (+ report.png)")
    t.add_column("stage")
    t.add_column("rate", justify="right")
    for stage, rates in derived["stages"].items():
        t.add_row(stage, ", ".join(f"{v:,.1f} {k.replace('_per_s', '/s')}" for k, v in rates.items()))
    console.print(t)
    console.print(f"slowest stage: {derived['slowest_stage']}")
    console.print(json.dumps(derived["verdict"]))
    verdict = derived["verdict"]
    if verdict["acknowledged_calls_lost"] or verdict["sessions_completed_twice"]:
        raise typer.Exit(1)
