"""`python -m factory …`: repos, issues, sample, translate, plan, run, status, reap, export, push, harvest.

The commands of each stage live in `cli_ingest` and `cli_publish`; running the sessions (`run`, `status`,
`reap`, `harvest`) lives here."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy.orm import Session as OrmSession

from factory import cli_ingest, cli_publish, cli_rehearse
from factory.cli_common import DataDir, Db, app, console, options_command
from factory.cli_common import db_sessions as _sessions
from factory.harvest import HarvestOptions
from factory.run.runners import RAY_EGRESS, RunOptions
from wire import UpstreamApi

__all__ = [
    "app",
    "cli_ingest",
    "cli_publish",
    "cli_rehearse",
    "main",
]  # the stage modules register their commands on `app`


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@options_command(RunOptions)
def run(
    settings: RunOptions,
    proxy_url: Annotated[
        str | None, typer.Option(envvar="DFLASH_PROXY_URL", help="The proxy as the host sees it")
    ] = None,
    data_dir: DataDir = Path("data"),
    db: Db = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray", envvar="DFLASH_RAY_ADDRESS", help="Place sessions on this Ray cluster (HEAD:6379)"
        ),
    ] = None,
    store_url: Annotated[
        str | None, typer.Option(envvar="DFLASH_STORE_URL", help="With --ray: where the nodes' calls land")
    ] = None,
    upstream: Annotated[
        str | None, typer.Option(envvar="TARGET_URL", help="With --ray: the target every node reaches")
    ] = None,
    upstream_api: Annotated[
        UpstreamApi,
        typer.Option(
            help="With --ray: what the node proxies send the target (chat: Messages and Responses translated "
            "to Chat Completions, with the target's exact token ids; native: each API as is)"
        ),
    ] = "native",
) -> None:
    """Run planned sessions with N concurrent workers (safe to run on many hosts against one PostgreSQL)."""
    if ray and settings.egress:
        console.print(f"[red]error:[/] {RAY_EGRESS}")
        raise typer.Exit(2)
    if not ray and (store_url or upstream):  # the local runner sends agents through --proxy-url's proxy
        console.print(
            "[red]error:[/] --store-url and --upstream are for --ray (the nodes' own proxies); "
            "without it, start the proxy with --store-url (docs/proxy.md)"
        )
        raise typer.Exit(2)
    if ray:
        # Ray is an optional heavy dependency (the `cluster` extra): imported only when --ray is given.
        from factory.run.ray_runner import run_on_cluster

        try:
            summary = run_on_cluster(
                _sessions(db, data_dir),
                settings.config(proxy_url="ray://node-proxy", data_dir=data_dir),
                address=ray,
                store_url=store_url,
                upstream=upstream,
                upstream_api=upstream_api,
                runner=settings.runner,
                model=settings.model,
                image=settings.image,
                time_limit_s=settings.session_timeout,
                console=console,
            )
        except ValueError as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from None
        typer.echo(json.dumps(summary))
        return
    if not proxy_url:
        console.print("[red]error:[/] --proxy-url (DFLASH_PROXY_URL) is required without --ray")
        raise typer.Exit(2)
    from factory.run.lifecycle import run_scope
    from factory.run.progress import Progress
    from factory.run.runner import Runner
    from factory.run.runner_types import RunnerArgs
    from factory.run.runners import get_runner, uses_sandboxes
    from factory.run.stopping import sigterm_as_interrupt

    sessions = _sessions(db, data_dir)
    # Many `run` processes may share a data folder (scale-out): no lock, but each reaps the dead ones.
    with run_scope(data_dir, console, sandboxes=uses_sandboxes(settings.runner), exclusive=False) as ledger:
        args = RunnerArgs(
            model=settings.model,
            image=settings.image,
            time_limit_s=settings.session_timeout,
            run_id=ledger.record.run_id,
            egress=settings.egress,
        )
        r = Runner(sessions, get_runner(settings.runner, args), settings.config(proxy_url, data_dir))
        progress = Progress(console, proxy_url=proxy_url)
        with progress.live(), sigterm_as_interrupt():  # told to stop, it stores and gives back what it holds
            r.run(on_tick=progress.tick)
        progress.final(r)


@app.command()
def status(data_dir: DataDir = Path("data"), db: Db = None) -> None:
    """Counts of repositories, issues, translations and sessions; sessions leased by dead runners of this
    host, and what a reap of the data folder's dead runs would remove."""
    from sqlalchemy import func, select

    from factory.db import Issue, Repo, Session, Translation
    from factory.run.lifecycle import preview
    from factory.run.queue import dead_local_leases

    sessions = _sessions(db, data_dir)
    with sessions() as s:
        out: dict[str, object] = {
            "repos": dict(s.execute(select(Repo.status, func.count()).group_by(Repo.status)).all()),
            "issues": s.scalar(select(func.count()).select_from(Issue)),
            "translations": dict(
                s.execute(select(Translation.status, func.count()).group_by(Translation.status)).all()
            ),
            "sessions": dict(s.execute(select(Session.status, func.count()).group_by(Session.status)).all()),
        }
        out["setup_failures"] = _setup_failures(s)
    out["dead_leases"] = [{"session": sid, "owner": owner} for sid, owner in dead_local_leases(sessions)]
    out["reap"] = preview(data_dir)
    typer.echo(json.dumps(out, indent=1))


@app.command()
def reap(
    data_dir: DataDir = Path("data"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be removed.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    watch: Annotated[
        str | None,
        typer.Option(
            metavar="RUN_ID",
            help="Wait until that run of --data-dir dies, reap what it left at once, then exit "
            "(each run starts one).",
        ),
    ] = None,
) -> None:
    """Reap what the dead runs of the data folder left on this host (what a run does before it starts):
    their processes, sandboxes and firewall rules, their ledgers, then their proxy's spool, rolled."""
    from factory.run.lifecycle import reap as reap_dead
    from factory.run.lifecycle import watch_run

    if watch:
        found = watch_run(data_dir, watch)
        for line in found.lines() if found else [f"run {watch} ended cleanly"]:
            typer.echo(line)
        return
    report = reap_dead(data_dir, dry_run=dry_run)
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(report)))
        return
    for line in report.lines("would remove" if dry_run else "removed"):
        typer.echo(line)
    if report.empty() and not report.spool_rolled:
        typer.echo("nothing left by dead runs")


def _setup_failures(s: OrmSession) -> dict[str, dict[str, object]]:
    """Per repository whose environment setup failed in a session (on any host): how many sessions ran
    without their environment image, and the last reason (the sessions still ran, from the toolchain)."""
    from sqlalchemy import select

    from factory.db import Issue, Repo, Session

    rows = s.execute(
        select(Repo.name, Session.environment)
        .join(Issue, Issue.repo_id == Repo.id)
        .join(Session, Session.issue_id == Issue.id)
        .where(Session.environment.is_not(None))
        .order_by(Session.finished_at)
    ).all()
    failed: Counter[str] = Counter()
    last: dict[str, object] = {}
    for name, env in rows:
        setup = (env or {}).get("setup") or {}
        if setup.get("status") == "failed":
            failed[name] += 1
            last[name] = setup.get("reason")  # rows come in finishing order: the latest one wins
    return {name: {"sessions": n, "reason": last[name]} for name, n in failed.items()}


@options_command(HarvestOptions)
def harvest(
    settings: HarvestOptions,
    data_dir: DataDir = Path("data"),
    db: Db = None,
    target_url: Annotated[
        str | None, typer.Option(envvar="TARGET_URL", help="Unset: start the CPU target")
    ] = None,
    github_token: Annotated[
        str | None, typer.Option(envvar="GITHUB_TOKEN", help="Unset: bundled sample")
    ] = None,
) -> None:
    """The whole job: issues → target and proxy → translate → plan → Docker → run → export → summary."""
    from factory.harvest import run_harvest
    from factory.run.ledger import DataDirBusy

    own = {
        "data_dir": data_dir,
        "db": db,
        "target_url": target_url or None,
        "github_token": github_token or None,
    }
    try:
        summary = run_harvest(settings.model_copy(update=own), console)
    except DataDirBusy as exc:
        console.print(f"[red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(3) from None
    typer.echo(json.dumps(summary, default=str))


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
