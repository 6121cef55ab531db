"""`python -m trainer replay`: held-out recorded calls against endpoints → report.json, summary.md, plots."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import typer

from clikit import settings_command
from trainer.replay import evidence
from trainer.replay.calls import ReplayError, load_calls
from trainer.replay.client import Outcome
from trainer.replay.report import build_report
from trainer.replay.run import Progress, replay
from trainer.replay.settings import ReplaySettings
from trainer.replay.summary import markdown, plots


def progress_reporter() -> tuple[Progress, Any]:
    """A rich bar on a terminal; off one, a plain line per finished call (logs and CI read those)."""
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        bar = Bar(
            "[bold]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=False,
            console=Console(stderr=True),  # stdout carries the table
        )
        task: list[Any] = []

        def start(name: str, total: int) -> None:
            bar.start()
            task[:] = [bar.add_task(name, total=total)]

        return Progress(start, lambda _o: bar.advance(task[0]), bar.stop), bar
    state: dict[str, Any] = {"name": "", "done": 0, "total": 0}

    def start_plain(name: str, total: int) -> None:
        state.update(name=name, done=0, total=total)

    def advance(o: Outcome) -> None:
        state["done"] = int(state["done"]) + 1
        what = f"{o.completion_tokens} tokens in {o.seconds:.2f}s" if o.ok else f"FAILED {o.error}"
        typer.echo(
            f"{state['name']}: {state['done']}/{state['total']} {o.call_id} ({o.group}) {what}", err=True
        )

    return Progress(start_plain, advance), None


def run_replay(settings: ReplaySettings, progress: Progress | None = None) -> dict[str, Any]:
    """Select, replay, write OUT/report.json, OUT/summary.md and the plots; the report (raises ReplayError)."""
    calls, selection = load_calls(
        settings.data,
        n=settings.calls,
        seed=settings.seed,
        cap=settings.max_tokens,
        run_dir=settings.held_out_from,
        fraction=settings.eval_fraction,
        decode=settings.decode_tokens,
    )
    result = asyncio.run(replay(settings, calls, progress or Progress()))
    rows = evidence.rows(calls, result)
    report = build_report(settings, selection, calls, result, rows)
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    evidence.write(rows, out / "evidence.parquet")
    (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (out / "summary.md").write_text(markdown(report))
    report["plots"] = [str(p) for p in plots(report, out)]
    return report


@settings_command(ReplaySettings)
def replay_command(settings: ReplaySettings) -> None:
    """Replay held-out agent calls against OpenAI-compatible endpoints: MAL from the servers' spec-decode
    counters, tokens/s, time to first token and speedup over a baseline, per agent and language."""
    progress, _bar = progress_reporter()
    try:
        report = run_replay(settings, progress)
    except ReplayError as e:
        typer.echo(f"replay: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(markdown(report))
    typer.echo(
        f"written: {settings.out / 'report.json'}, {settings.out / 'summary.md'}, {', '.join(report['plots'])}"
    )
    if report["refused"]:
        typer.echo("replay: REFUSED — " + "; ".join(report["problems"]), err=True)
        raise typer.Exit(1)
    exit_unranked(report, settings.rank, "replay")


def exit_unranked(report: dict[str, Any], asked: bool, who: str) -> None:
    """Exit 3 when a ranking was asked for and the judgement cannot give one (below the floor)."""
    judgement = report.get("judgement") or {}
    if asked and not judgement.get("ranked"):
        typer.echo(f"{who}: NOT RANKED — {judgement.get('verdict')}", err=True)
        raise typer.Exit(3)
