"""Command line of the sandbox layer: build images, collect what dead runs left, try one session."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import asdict
from pathlib import Path

import typer

from records.agents import AGENT_NAMES, AgentName
from sandboxes.config import SandboxSettings


def _client():  # type: ignore[no-untyped-def]
    import docker

    return docker.from_env()


def _log(line: str) -> None:
    typer.echo(line, err=True)


def cmd_build(args: argparse.Namespace) -> None:
    from sandboxes.images.build import build_agents

    typer.echo(build_agents(_client(), SandboxSettings(), log=_log))


def cmd_gc(args: argparse.Namespace) -> None:
    from sandboxes.gc import collect, reap_data_dir, watch

    if args.watch:
        if len(args.data_dir or []) != 1:
            typer.echo("error: --watch needs exactly one --data-dir", err=True)
            sys.exit(2)
        found = watch(args.data_dir[0], args.watch, _client)
        for line in found.lines() if found else [f"run {args.watch} ended cleanly"]:
            typer.echo(line)
        return
    report = collect(_client(), run_id=args.run, everything=args.all, dry_run=args.dry_run)
    for data_dir in args.data_dir or []:
        # The dead runs of that data folder: their processes, sandboxes and spool.
        report.merge(reap_data_dir(data_dir, _client, dry_run=args.dry_run))
    if args.json:
        typer.echo(json.dumps(asdict(report)))
        return
    for line in report.lines("would remove" if args.dry_run else "removed"):
        typer.echo(line)
    if report.empty() and not report.spool_rolled:
        typer.echo("nothing left by dead runs")


def cmd_try(args: argparse.Namespace) -> None:
    from docker.errors import ImageNotFound

    from sandboxes.images.build import build_agents
    from sandboxes.session import SessionRequest, run_session

    settings = SandboxSettings()
    if args.egress:
        settings = settings.model_copy(update={"egress": args.egress})
    client = _client()
    image = args.image or build_agents(client, settings, log=_log)
    req = SessionRequest(
        agent=args.agent,
        repo=args.repo.resolve(),
        commit=args.commit,
        task=args.task,
        proxy_url=args.proxy,
        image=image,
        model=args.model,
        command=args.command,
        time_limit_s=args.time_limit,
        settings=settings,
    )
    if args.env:
        # The repository's environment image, test command and setup outcome (docs/sandboxes.md).
        from sandboxes.environment import prepare

        prepared = prepare(client, settings, image, req.repo, args.commit, setup=args.setup, test=args.test)
        for key, value in prepared.request_fields().items():
            setattr(req, key, value)
    if args.session:
        req.session_id = args.session
    if args.run:
        req.run_id = args.run
    # SIGTERM would end Python without running `finally`: turn it into SystemExit so teardown runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result = run_session(req, client)
    except (ValueError, ImageNotFound) as exc:  # bad input: an unknown revision, agent, image or proxy URL
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    typer.echo(json.dumps(result.to_dict(), ensure_ascii=False, indent=None if args.compact else 1))
    sys.exit(0 if result.status == "succeeded" else 1)


def cmd_env_gc(args: argparse.Namespace) -> None:
    from sandboxes.envimage import gc_env_images

    settings = SandboxSettings()
    if args.max_age_days is not None:
        settings = settings.model_copy(update={"env_max_age_days": args.max_age_days})
    if args.budget_gb is not None:
        settings = settings.model_copy(update={"env_budget_gb": args.budget_gb})
    removed = gc_env_images(_client(), settings, dry_run=args.dry_run, repo_id=args.repo)
    verb = "would remove" if args.dry_run else "removed"
    for tag in removed:
        typer.echo(f"{verb} {tag}")
    typer.echo(f"{verb}: {len(removed)} environment images")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandboxes", description=__doc__)
    sub = parser.add_subparsers(dest="command_name", required=True)
    sub.add_parser("build", help="build (or find) the base and agents images; prints the agents tag")
    gc = sub.add_parser("gc", help="remove containers, networks and firewall rules left by dead runs")
    gc.add_argument("--run", help="only this run id")
    gc.add_argument("--all", action="store_true", help="also what live runs hold")
    gc.add_argument(
        "--data-dir",
        type=Path,
        action="append",
        help="also reap the processes the dead runs of this data folder recorded, and roll its spool (repeatable)",
    )
    gc.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    gc.add_argument("--json", action="store_true", help="print the report as one JSON object")
    gc.add_argument(
        "--watch",
        metavar="RUN_ID",
        help="wait until that run of --data-dir dies, reap what it left at once, then exit (started by each run)",
    )
    eg = sub.add_parser(
        "env-gc", help="remove environment images past their age, then the oldest over budget"
    )
    eg.add_argument("--max-age-days", type=float, help="default: DFLASH_SANDBOX_ENV_MAX_AGE_DAYS (14)")
    eg.add_argument("--budget-gb", type=float, help="default: DFLASH_SANDBOX_ENV_BUDGET_GB (100)")
    eg.add_argument("--repo", help="only this repository's images (its registry name)")
    eg.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    t = sub.add_parser("try", help="run one session and print its result as JSON")
    t.add_argument("--agent", choices=AGENT_NAMES, default=AgentName.CLAUDE_CODE.value)
    t.add_argument("--egress", choices=["none", "registries"], help="network policy (default: settings)")
    t.add_argument("--env", action="store_true", help="run in the repository's environment image, with tests")
    t.add_argument("--setup", help="setup command for --env (default: detected from the build files)")
    t.add_argument("--test", help="test command for --env (default: detected)")
    t.add_argument("--repo", type=Path, required=True)
    t.add_argument("--commit", required=True, help="base commit (any git revision)")
    t.add_argument("--task", default="", help="the task, in English or Korean")
    t.add_argument(
        "--proxy", required=True, help="the proxy's URL as the host sees it, e.g. http://127.0.0.1:8100"
    )
    t.add_argument("--session", help="session id (default: a new uuid)")
    t.add_argument("--run", help="run id for the labels (default: try-<random>)")
    t.add_argument("--command", help="run this shell command inside instead of an agent (debug confinement)")
    t.add_argument("--model", default="target", help="model name the agent asks the proxy for")
    t.add_argument(
        "--time-limit", type=float, help="seconds the agent may run (default: the sandbox wall time)"
    )
    t.add_argument("--image", help="agents image tag (default: build or find the current one)")
    t.add_argument("--compact", action="store_true", help="print the JSON on one line")
    args = parser.parse_args(argv)
    if args.command_name == "try" and not args.command and not args.task:
        parser.error("try needs --task (or --command)")
    {"build": cmd_build, "gc": cmd_gc, "try": cmd_try, "env-gc": cmd_env_gc}[args.command_name](args)
