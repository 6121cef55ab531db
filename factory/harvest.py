"""`python -m factory harvest`: the whole job in one command.

issues (GitHub with GITHUB_TOKEN, else the bundled sample) → services (the CPU stand-in target when
TARGET_URL is unset, and the proxy) → translate what is missing → plan → Docker engine and images →
run sessions → roll the proxy's spool → export → summary.

Before anything starts, the data folder is locked (a second live harvest on it is refused) and what dead
runs of that folder left on this host is reaped (`factory.run.lifecycle`)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import connect, default_url, session_factory
from factory.harvest_options import HarvestOptions
from factory.ingest import sample
from factory.ingest.translate import Translator, translate_in_background
from factory.publish.export import ExportStats, export, load_tokenizer
from factory.run import queue
from factory.run.ledger import Ledger
from factory.run.lifecycle import run_scope
from factory.run.plan import PlanConfig, plan
from factory.run.progress import Progress
from factory.run.runner import RunConfig, Runner
from factory.run.runner_types import RunnerArgs, SessionRunner
from factory.run.runners import get_runner, uses_sandboxes
from factory.run.sandbox_runner import build_image, ensure_docker
from factory.run.services import services, upload_to_store
from proxy.roller import roll_data_dir

__all__ = ["HarvestOptions", "run_harvest"]  # HarvestOptions: factory/harvest_options.py


Sessions = sessionmaker[OrmSession]


def _issues(opts: HarvestOptions, sessions: Sessions, console: Console) -> dict[str, object]:
    if not opts.github_token:
        got = sample.install(sessions, opts.data_dir / "sample-repos")
        console.print(
            f"[bold]issues[/] bundled offline sample: +{got['issues']} issues, +{got['translations']} Korean"
        )
        return {"issues_new": got["issues"]}
    from factory.ingest import registry
    from factory.ingest.github import GitHubClient
    from factory.ingest.issues import DbEtagCache, harvest

    api = os.environ.get("GITHUB_API_URL", "https://api.github.com")
    with GitHubClient(opts.github_token, base_url=api, cache=DbEtagCache(sessions)) as gh:
        rep = harvest(
            sessions,
            registry.load(),
            gh,
            limit_repos=opts.repos_limit,
            on_repo=lambda n, k: console.print(f"  {n}: +{k} issues"),
        )
    console.print(f"[bold]issues[/] +{rep.issues_new} from {rep.repos_ok} repositories")
    if rep.missing:
        console.print(f"[yellow]not found on GitHub (404):[/] {', '.join(rep.missing)}")
    return {"issues_new": rep.issues_new, "repos_missing": rep.missing}


# A Hub model id (`org/name`): vLLM's `root` when it was started with one.
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def _served_tokenizer(root: str, console: Console) -> str | None:
    """The tokenizer of what the target serves, when it loads here: the stand-in's folder, or the Hub
    name a vLLM was started with; else None, said on the console (secrets then cost a call its ids)."""
    if Path(root).is_dir() or _HUB_ID.fullmatch(root):
        try:
            load_tokenizer(root)
            console.print(f"[bold]tokenizer[/] {root} (secrets inside token ids are redacted with it)")
            return root
        except ValueError as exc:
            console.print(f"[yellow]tokenizer[/] {exc}", soft_wrap=True)
    console.print(
        f"[yellow]tokenizer[/] none for the served {root!r}: a call whose text holds a secret loses its ids "
        "in the export; pass --tokenizer (a folder or a Hub name) to keep them",
        soft_wrap=True,
    )
    return None


def _session_runner(opts: HarvestOptions, model: str, ledger: Ledger, console: Console) -> SessionRunner:
    image = opts.image
    if uses_sandboxes(opts.runner):
        console.print(
            "[bold]docker[/] ensuring the engine and the agents image (the first build takes minutes)"
        )
        ensure_docker()
        image = image or build_image(lambda line: console.print(f"  {line}"))
    args = RunnerArgs(
        model=model,
        image=image,
        time_limit_s=opts.session_timeout,
        run_id=ledger.record.run_id,
        command=opts.sandbox_command,
        egress=opts.egress,
    )
    return get_runner(opts.runner, args)


def _planner(sessions: Sessions, cfg: PlanConfig, console: Console) -> Callable[[int, object], None]:
    """`on_done` of the background translation: plan what a landed translation makes plannable. Called
    from the translation's worker threads, so planning is serialised (re-planning only adds what is new)."""
    lock = threading.Lock()

    def planned(_issue_id: int, _result: object) -> None:
        with lock:
            added = plan(sessions, cfg).added
        if added:
            console.print(f"[bold]plan[/] +{added} sessions of newly translated issues", soft_wrap=True)

    return planned


def _translated(translating: Future[dict[str, int]], console: Console) -> dict[str, int]:
    counts = translating.result()
    console.print(f"[bold]translate[/] {counts['ok']} accepted, {counts['rejected']} rejected")
    return counts


def _sessions_stage(
    opts: HarvestOptions, sessions: Sessions, console: Console, ledger: Ledger
) -> dict[str, object]:
    """Services up → plan → sessions, with translation beside them; the services are stopped on the way out."""
    summary: dict[str, object] = {}
    with services(opts, console, ledger, store_url=opts.store_url) as (proxy, _target, model, root):
        summary["target_model"] = model
        summary["tokenizer"] = opts.tokenizer or _served_tokenizer(root, console)
        summary["chat_template"] = opts.served_template()
        cfg = opts.plan_config()
        ps = plan(sessions, cfg)  # English sessions, and Korean ones of issues translated before
        unfixed = f"; {ps.without_fix} issues without a known fix left out" if cfg.require_fix else ""
        console.print(f"[bold]plan[/] +{ps.added} sessions ({ps.total} in the plan){unfixed}")
        # Translations (tagged: kept out of the agent data) run beside the sessions; each accepted one
        # plans its issue's Korean sessions at once, so they start without waiting for the rest.
        translating = translate_in_background(
            sessions,
            Translator(f"{proxy}/s/translate/v1", model=model),
            limit=opts.translate_limit,
            concurrency=opts.translate_concurrency,
            on_done=_planner(sessions, cfg, console),
        )
        if opts.ray:  # many hosts: Ray is imported only then (an optional heavy dependency)
            from factory.run.ray_runner import run_on_cluster

            if not opts.target_url:
                console.print(
                    "[yellow]ray[/] the CPU stand-in listens on this host's loopback: only nodes on "
                    "this host reach it; set TARGET_URL to a target every node reaches"
                )
            cluster_cfg = RunConfig(proxy_url="ray://node-proxy", data_dir=opts.data_dir, limit=opts.limit)
            summary["run"] = run_on_cluster(
                sessions,
                cluster_cfg,
                address=opts.ray,
                store_url=opts.store_url,
                upstream=opts.target_url or _target,
                upstream_api=opts.proxy_upstream_api(),
                runner=opts.runner,
                model=model,
                image=opts.image,
                time_limit_s=opts.session_timeout,
                console=console,
                more_coming=lambda: not translating.done(),
            )
            summary["translated"] = _translated(translating, console)
            return summary
        session_runner = _session_runner(opts, model, ledger, console)
        run_cfg = RunConfig(
            proxy_url=proxy, data_dir=opts.data_dir, concurrency=opts.concurrency, limit=opts.limit
        )
        runner = Runner(sessions, session_runner, run_cfg, more_coming=lambda: not translating.done())
        progress = Progress(console, proxy_url=proxy)
        with progress.live():
            stats = runner.run(on_tick=progress.tick)
        progress.final(runner)
        summary["translated"] = _translated(translating, console)
        summary["run"] = {
            "done": stats.done,
            "agent_failed": stats.agent_failed,
            "infra_failed": stats.infra_failed,
            "retries": stats.infra_retries,
        }
    return summary


def run_harvest(opts: HarvestOptions, console: Console | None = None) -> dict[str, object]:
    console = console or Console(stderr=True, soft_wrap=True)
    t0 = time.monotonic()
    if opts.tokenizer:  # a tokenizer that is named must load: say so now, not after the sessions
        try:
            load_tokenizer(opts.tokenizer)
        except ValueError as exc:
            raise ValueError(f"--tokenizer: {exc}") from exc
    with run_scope(opts.data_dir, console, sandboxes=uses_sandboxes(opts.runner)) as ledger:
        db_url = opts.db or default_url(opts.data_dir)
        sessions = session_factory(connect(db_url))
        summary: dict[str, object] = {"db": db_url, **_issues(opts, sessions, console)}
        summary |= _sessions_stage(opts, sessions, console, ledger)
        # the proxy is stopped: roll what it left in its spool, then export
        console.print(f"[bold]roll[/] {roll_data_dir(opts.data_dir)}", soft_wrap=True)
        if opts.store_url:  # what the proxy could not upload before it stopped, and the transcripts
            console.print(f"[bold]upload[/] {upload_to_store(opts.data_dir, opts.store_url)}", soft_wrap=True)
    out = opts.data_dir / "dataset"
    es = export(
        sessions,
        opts.data_dir,
        out,
        held_out=opts.held_out,
        calls_url=opts.store_url,
        target_model=summary.get("target_model"),
        tokenizer=summary.get("tokenizer"),
        chat_template=summary.get("chat_template"),
        rehearsal=opts.target_engine == "scripted",
        progress=lambda line: console.print(f"export {line}", markup=False, soft_wrap=True),
    )
    summary["dataset"] = str(out)
    summary["export"] = {
        "sessions": es.sessions,
        "calls": es.calls,
        "by_agent_lang": es.by_cell,
        "secrets": dict(es.secrets),
        "duplicates_dropped": es.duplicates_dropped,
        "stale_attempt_calls_skipped": es.stale_attempt_calls_skipped,
        "exact_ids_fraction": es.exact_ids_fraction,
        "ids_redacted": es.ids_redacted,
        "token_ids_dropped": es.token_ids_dropped,
        "held_out_by": es.split_by,
    }
    summary["elapsed_s"] = round(time.monotonic() - t0, 1)
    summary["queue"] = queue.counts(sessions)
    print_summary(console, summary, es)
    return summary


def print_summary(console: Console, summary: dict[str, object], es: ExportStats) -> None:
    t = Table(title=f"harvest done in {summary['elapsed_s']} s · dataset: {summary['dataset']}")
    for col in ("agent", "language", "sessions", "calls", "prompt tokens", "completion tokens"):
        t.add_column(col, justify="right" if col not in ("agent", "language") else "left")
    rows = [(cell.split("/", 1), c) for cell, c in sorted(es.by_cell.items())]
    for (agent, lang), c in [*rows, (["all", ""], es.totals())]:
        t.add_row(
            agent,
            lang,
            str(c["sessions"]),
            str(c["calls"]),
            f"{c['prompt_tokens']:,}",
            f"{c['completion_tokens']:,}",
        )
    console.print(t)
    kept = "n/a" if es.exact_ids_fraction is None else f"{es.exact_ids_fraction:.1%}"
    console.print(
        f"queue: {summary['queue']}  ·  secrets scrubbed: {dict(es.secrets) or 'none'}  ·  "
        f"calls keeping exact ids: {kept} ({es.ids_redacted} with a secret redacted in them)  ·  "
        f"held out by {es.split_by}"
    )
