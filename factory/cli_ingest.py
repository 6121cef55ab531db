"""`python -m factory repos check|issues|sample|translate|plan`: the ingest stage's commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from factory.cli_common import DataDir, Db, app, console, options_command, repos_app
from factory.cli_common import db_sessions as _sessions
from factory.run.plan import PlanOptions


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
        rep = harvest(
            sessions,
            registry.load(path),
            gh,
            limit_repos=limit_repos,
            on_repo=lambda n, k: console.print(f"{n}: +{k}"),
        )
        console.print(
            f"+{rep.issues_new} issues from {rep.repos_ok} repositories; "
            f"{gh.stats.requests} requests, {gh.stats.not_modified} not modified"
        )
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
    counts = translate_missing(
        _sessions(db, data_dir), tr, limit=limit, retry_rejected=retry_rejected, concurrency=concurrency
    )
    console.print(counts)


@options_command(PlanOptions)
def plan(
    settings: PlanOptions,
    data_dir: DataDir = Path("data"),
    db: Db = None,
    dry_run: Annotated[bool, typer.Option(help="Show what would be added")] = False,
) -> None:
    """Plan sessions (issue × language × agent) and print the plan's size by language and agent."""
    from factory.run.plan import plan as do_plan
    from factory.run.plan import summary_table

    s = do_plan(_sessions(db, data_dir), settings.plan_config(), dry_run=dry_run)
    unfixed = f" ({s.without_fix} without a known fix left out)" if settings.require_fix else ""
    title = (
        f"{'would add' if dry_run else 'plan'}: {s.issues} issues{unfixed}, {s.translated} with Korean; "
        f"+{s.added} new"
    )
    Console().print(summary_table(s, title))
