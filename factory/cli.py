"""`python -m factory …`: repos, issues, sample, translate, plan, run, status, export, push, harvest."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from clikit import settings_command
from factory.harvest import HarvestOptions
from factory.run.runners import RunOptions

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
repos_app = typer.Typer(add_completion=False, help="The repository registry (repos.yaml).")
app.add_typer(repos_app, name="repos")
console = Console(stderr=True, soft_wrap=True)  # off a terminal: one line per message

DataDir = Annotated[
    Path, typer.Option("--data-dir", envvar="DFLASH_DATA_DIR", help="Database, calls, dataset.")
]
Db = Annotated[
    str | None,
    typer.Option(
        "--db", envvar="DFLASH_DB_URL", help="SQLAlchemy URL (default: SQLite DATA_DIR/factory.db)."
    ),
]


def _sessions(db: str | None, data_dir: Path):  # type: ignore[no-untyped-def]
    from factory.db import connect, default_url, session_factory

    return session_factory(connect(db or default_url(data_dir)))


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@repos_app.command("check")
def repos_check(
    path: Annotated[Path | None, typer.Option(help="repos.yaml to validate")] = None,
    online: Annotated[bool, typer.Option(help="Ask the GitHub API whether every repository exists")] = False,
    token: Annotated[str | None, typer.Option(envvar="GITHUB_TOKEN")] = None,
    api_url: Annotated[str, typer.Option(envvar="GITHUB_API_URL")] = "https://api.github.com",
) -> None:
    """Validate repos.yaml; with --online, report every name that 404s."""
    from collections import Counter

    from factory.ingest import registry

    try:
        reg = registry.load(path)
    except registry.RegistryError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None
    langs = Counter(r.language for r in reg.repos)
    console.print(
        f"{len(reg.repos)} repositories; languages: "
        + ", ".join(f"{k} {v}" for k, v in langs.most_common(12))
    )
    if not online:
        return
    from factory.ingest.fixlink import repo_warnings
    from factory.ingest.github import GitHubClient, NotFound

    missing, flagged = [], 0
    with GitHubClient(token, base_url=api_url) as gh:
        for r in reg.repos:
            try:
                notes = repo_warnings(gh.repo(r.name))
            except NotFound:
                missing.append(r.name)
                console.print(f"[red]404[/] {r.name}")
                continue
            if notes:  # still harvestable in part, so a warning rather than a failure
                flagged += 1
                console.print(f"[yellow]{', '.join(notes)}[/] {r.name}")
    console.print(
        f"{len(missing)} of {len(reg.repos)} not found; {flagged} archived, forks or without issues"
    )
    raise typer.Exit(1 if missing else 0)


@app.command()
def issues(
    data_dir: DataDir = Path("data"),
    db: Db = None,
    token: Annotated[str | None, typer.Option(envvar="GITHUB_TOKEN")] = None,
    api_url: Annotated[str, typer.Option(envvar="GITHUB_API_URL")] = "https://api.github.com",
    limit_repos: Annotated[int | None, typer.Option(help="Only the first N repositories")] = None,
    path: Annotated[Path | None, typer.Option(help="repos.yaml")] = None,
) -> None:
    """Harvest new GitHub issues (incremental: since= and ETags) with their base commits."""
    from factory.ingest import registry
    from factory.ingest.github import GitHubClient
    from factory.ingest.issues import DbEtagCache, harvest

    sessions = _sessions(db, data_dir)
    with GitHubClient(token, base_url=api_url, cache=DbEtagCache(sessions)) as gh:
        rep = harvest(sessions, registry.load(path), gh, limit_repos=limit_repos,
                      on_repo=lambda n, k: console.print(f"{n}: +{k}"))  # fmt: skip
        console.print(f"+{rep.issues_new} issues from {rep.repos_ok} repositories; "
                      f"{gh.stats.requests} requests, {gh.stats.not_modified} not modified")  # fmt: skip
    if rep.missing:
        console.print(f"[yellow]404 (not found): {', '.join(rep.missing)}[/]")
    for name, err in rep.errors.items():
        console.print(f"[red]{name}: {err}[/]")
    console.print(f"skipped: {rep.skipped}")


@app.command("sample")
def sample_cmd(data_dir: DataDir = Path("data"), db: Db = None) -> None:
    """Load the bundled offline sample (repos generated under DATA_DIR/sample-repos)."""
    from factory.ingest import sample

    got = sample.install(_sessions(db, data_dir), data_dir / "sample-repos")
    console.print(got)


@app.command()
def translate(
    url: Annotated[
        str, typer.Option(envvar="DFLASH_TRANSLATE_URL", help="OpenAI-compatible base URL (…/v1)")
    ],
    data_dir: DataDir = Path("data"),
    db: Db = None,
    model: Annotated[str | None, typer.Option(help="Default: the endpoint's first model")] = None,
    api_key: Annotated[str, typer.Option(envvar="DFLASH_TRANSLATE_KEY")] = "dflash",
    limit: Annotated[int | None, typer.Option()] = None,
    retry_rejected: Annotated[bool, typer.Option()] = False,
    concurrency: Annotated[int, typer.Option()] = 4,
) -> None:
    """Translate every issue without a cached Korean translation (tagged `translation`)."""
    from factory.ingest.translate import Translator, translate_missing

    tr = Translator(url, model=model, api_key=api_key)
    counts = translate_missing(_sessions(db, data_dir), tr, limit=limit, retry_rejected=retry_rejected,
                               concurrency=concurrency)  # fmt: skip
    console.print(counts)


@app.command()
def plan(
    data_dir: DataDir = Path("data"),
    db: Db = None,
    agents: Annotated[str, typer.Option(help="Agents and weights: claude-code,codex=1,opencode=0.5")] = (
        "claude-code,codex,opencode"
    ),
    langs: Annotated[str, typer.Option(help="Languages and weights: en,ko")] = "en,ko",
    seed: Annotated[int, typer.Option()] = 0,
    dry_run: Annotated[bool, typer.Option(help="Show what would be added")] = False,
) -> None:
    """Plan sessions (issue × language × agent) and print the plan's size by language and agent."""
    from factory.run.plan import AGENTS, LANGS, PlanConfig, parse_mix, summary_table
    from factory.run.plan import plan as do_plan

    try:
        cfg = PlanConfig(agents=parse_mix(agents, AGENTS), langs=parse_mix(langs, LANGS), seed=seed)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    s = do_plan(_sessions(db, data_dir), cfg, dry_run=dry_run)
    title = (
        f"{'would add' if dry_run else 'plan'}: {s.issues} issues, {s.translated} with Korean; +{s.added} new"
    )
    Console().print(summary_table(s, title))


@app.command()
@settings_command(RunOptions)
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
) -> None:
    """Run planned sessions with N concurrent workers (safe to run on many hosts against one PostgreSQL)."""
    if ray:
        # Ray is an optional heavy dependency (the `cluster` extra): imported only when --ray is given.
        from factory.run.ray_runner import run_from_cli

        try:
            summary = run_from_cli(_sessions(db, data_dir), settings, data_dir, address=ray, store_url=store_url,
                                   upstream=upstream, console=console)  # fmt: skip
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

    sessions = _sessions(db, data_dir)
    # Many `run` processes may share a data folder (scale-out): no lock, but each reaps the dead ones.
    with run_scope(data_dir, console, sandboxes=uses_sandboxes(settings.runner), exclusive=False) as ledger:
        args = RunnerArgs(model=settings.model, image=settings.image, time_limit_s=settings.session_timeout,
                          run_id=ledger.record.run_id)  # fmt: skip
        r = Runner(sessions, get_runner(settings.runner, args), settings.config(proxy_url, data_dir))
        progress = Progress(console, proxy_url=proxy_url)
        with progress.live():
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
    out["dead_leases"] = [{"session": sid, "owner": owner} for sid, owner in dead_local_leases(sessions)]
    out["reap"] = preview(data_dir)
    typer.echo(json.dumps(out, indent=1))


@app.command()
def export(
    data_dir: DataDir = Path("data"),
    db: Db = None,
    out: Annotated[Path | None, typer.Option(help="Default: DATA_DIR/dataset")] = None,
    held_out: Annotated[float, typer.Option(help="Fraction of repositories in the test split")] = 0.05,
    rows_per_shard: Annotated[int, typer.Option()] = 20_000,
    repo_id: Annotated[
        str, typer.Option(help="Hub id used in the card's examples")
    ] = "dflash-factory/agent-traffic",
    calls_url: Annotated[
        str | None,
        typer.Option(envvar="DFLASH_EXPORT_CALLS_URL", help="Read the calls from this storage URL (s3://…)"),
    ] = None,
) -> None:
    """Write the dataset in the Hugging Face Hub layout (calls and sessions configs)."""
    from factory.publish.export import export as do_export

    dest = out or data_dir / "dataset"
    s = do_export(_sessions(db, data_dir), data_dir, dest, held_out=held_out, rows_per_shard=rows_per_shard,
                  repo_id=repo_id, calls_url=calls_url)  # fmt: skip
    console.print(f"{dest}: {s.sessions} sessions, {s.calls} calls, {s.duplicates_dropped} duplicates dropped, "
                  f"secrets scrubbed {dict(s.secrets) or 'none'}")  # fmt: skip


@app.command()
def push(
    repo_id: Annotated[str, typer.Option(help="ORG/NAME on the Hub")],
    data_dir: DataDir = Path("data"),
    folder: Annotated[Path | None, typer.Option(help="Default: DATA_DIR/dataset")] = None,
    dry_run: Annotated[bool, typer.Option(help="List what would be uploaded")] = False,
    private: Annotated[bool, typer.Option()] = False,
    token: Annotated[str | None, typer.Option(envvar="HF_TOKEN")] = None,
) -> None:
    """Upload the exported dataset with huggingface_hub (resumable large-folder upload)."""
    from factory.publish.push import push as do_push

    files = do_push(folder or data_dir / "dataset", repo_id, dry_run=dry_run, private=private, token=token)
    for path, size in files:
        typer.echo(f"{size:>12,}  {path}")
    typer.echo(f"{'would upload' if dry_run else 'uploaded'} {len(files)} files, {sum(s for _, s in files):,} bytes "
          f"to datasets/{repo_id}")  # fmt: skip


@app.command()
@settings_command(HarvestOptions)
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
    from sandboxes.ledger import DataDirBusy

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
