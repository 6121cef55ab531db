"""`python -m factory harvest`: the whole job in one command.

issues (GitHub with GITHUB_TOKEN, else the bundled sample) → services (the CPU stand-in target when
TARGET_URL is unset, and the proxy) → translate what is missing → plan → Docker engine and images →
run sessions → roll the proxy's spool → export → summary."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from factory.db import connect, default_url, session_factory
from factory.run import queue


@dataclass
class HarvestOptions:
    data_dir: Path = Path("data")
    db: str | None = None
    target_url: str | None = None  # unset: start the CPU stand-in target
    target_model: str = "smollm2"
    # The agents ask for up to 32,000 completion tokens; a stand-in with its native 8,192-token context
    # rejects every such call (as vLLM would). A longer limit lets the calls through; generation still
    # ends at EOS or when the session's time is up.
    target_max_model_len: int = 65536
    # ...and a CPU cannot decode 32k tokens within a session: the stand-in lowers larger limits to this.
    target_max_tokens: int = 64
    # chat: the proxy translates Messages/Responses calls into Chat Completions, the only API whose
    # answers carry exact token ids (vLLM and the stand-in alike); native relays each API as is.
    upstream_api: str = "chat"
    target_args: list[str] = field(default_factory=list)  # extra `serve-target` arguments
    github_token: str | None = None
    limit: int = 6
    concurrency: int = 1  # the CPU stand-in serves one forward at a time: more sessions only interleave
    agents: str = "claude-code,codex,opencode"
    langs: str = "en,ko"
    seed: int = 0
    repos_limit: int | None = None  # GitHub: only the first N repositories of repos.yaml
    translate_limit: int | None = None
    session_timeout_s: float = 600.0
    proxy_port: int = 0  # 0: a free port
    target_port: int = 0
    held_out: float = 0.05
    image: str | None = None
    runner: str = "sandbox"  # or "fake": scripted sessions without Docker (tests, dry runs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """A child process with its log under DATA_DIR/logs, ready once `health_url` answers 200."""

    def __init__(self, name: str, argv: list[str], health_url: str, log_dir: Path) -> None:
        self.name, self.argv, self.health_url = name, argv, health_url
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> None:
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.health_url, timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f}s; see {self.log_path}")

    def stop(self, timeout_s: float = 30) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@contextlib.contextmanager
def services(opts: HarvestOptions, console: Console) -> Iterator[tuple[str, str, str]]:
    """(proxy URL, target URL, model id); both stopped on exit."""
    started: list[Service] = []
    logs = opts.data_dir / "logs"
    py = sys.executable
    try:
        target = opts.target_url
        if not target:
            port = opts.target_port or free_port()
            target = f"http://127.0.0.1:{port}"
            console.print(f"[bold]target[/] starting the CPU stand-in ({opts.target_model}) on {target}")
            svc = Service(
                "target",
                [
                    py,
                    "-m",
                    "trainer",
                    "serve-target",
                    "--model",
                    opts.target_model,
                    "--port",
                    str(port),
                    "--max-model-len",
                    str(opts.target_max_model_len),
                    "--max-tokens-cap",
                    str(opts.target_max_tokens),
                    *opts.target_args,
                ],
                f"{target}/health",
                logs,
            )
            svc.start(timeout_s=900)
            started.append(svc)
        models = httpx.get(f"{target.rstrip('/')}/v1/models", timeout=30).json()
        model = str(models["data"][0]["id"])
        pport = opts.proxy_port or free_port()
        proxy = f"http://127.0.0.1:{pport}"
        upstream_api = opts.upstream_api if opts.target_url else "chat"  # the stand-in speaks Chat only
        console.print(
            f"[bold]proxy[/] {proxy} → {target} (upstream API: {upstream_api}), calls → {opts.data_dir}/calls"
        )
        svc = Service(
            "proxy",
            [py, "-m", "proxy", "serve", "--upstream", target, "--host", "127.0.0.1", "--port", str(pport),
             "--data-dir", str(opts.data_dir), "--upstream-api", upstream_api],
            f"{proxy}/healthz",
            logs,
        )  # fmt: skip
        svc.start(timeout_s=120)
        started.append(svc)
        yield proxy, target, model
    finally:
        for svc in reversed(started):
            svc.stop()


def roll_calls(data_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "proxy", "roll", "--data-dir", str(data_dir)], check=True)


def run_harvest(opts: HarvestOptions, console: Console | None = None) -> dict[str, object]:
    from factory.ingest import sample
    from factory.ingest.translate import Translator, translate_missing
    from factory.publish.export import export
    from factory.run.fake_runner import FakeSessionRunner
    from factory.run.plan import AGENTS, LANGS, PlanConfig, parse_mix, plan
    from factory.run.progress import Progress
    from factory.run.runner import RunConfig, Runner
    from factory.run.runner_types import SessionRunner
    from factory.run.sandbox_runner import SandboxSessionRunner, build_image, ensure_docker

    console = console or Console(stderr=True)
    t0 = time.monotonic()
    opts.data_dir.mkdir(parents=True, exist_ok=True)
    db_url = opts.db or default_url(opts.data_dir)
    sessions = session_factory(connect(db_url))
    agents, langs = parse_mix(opts.agents, AGENTS), parse_mix(opts.langs, LANGS)
    summary: dict[str, object] = {"db": db_url}

    # 1. issues
    if opts.github_token:
        from factory.ingest import registry
        from factory.ingest.github import GitHubClient
        from factory.ingest.issues import DbEtagCache, harvest

        reg = registry.load()
        api = os.environ.get("GITHUB_API_URL", "https://api.github.com")
        with GitHubClient(opts.github_token, base_url=api, cache=DbEtagCache(sessions)) as gh:
            rep = harvest(sessions, reg, gh, limit_repos=opts.repos_limit,
                          on_repo=lambda n, k: console.print(f"  {n}: +{k} issues"))  # fmt: skip
        console.print(f"[bold]issues[/] +{rep.issues_new} from {rep.repos_ok} repositories")
        if rep.missing:
            console.print(f"[yellow]not found on GitHub (404):[/] {', '.join(rep.missing)}")
        summary["issues_new"], summary["repos_missing"] = rep.issues_new, rep.missing
    else:
        got = sample.install(sessions, opts.data_dir / "sample-repos")
        console.print(
            f"[bold]issues[/] bundled offline sample: +{got['issues']} issues, +{got['translations']} Korean"
        )
        summary["issues_new"] = got["issues"]

    with services(opts, console) as (proxy, _target, model):
        # 2. translations (tagged: kept out of the agent data)
        tr = Translator(f"{proxy}/s/translate/v1", model=model)
        counts = translate_missing(sessions, tr, limit=opts.translate_limit)
        console.print(f"[bold]translate[/] {counts['ok']} accepted, {counts['rejected']} rejected")
        summary["translated"] = counts
        # 3. plan
        ps = plan(sessions, PlanConfig(agents=agents, langs=langs, seed=opts.seed))
        console.print(f"[bold]plan[/] +{ps.added} sessions ({ps.total} in the plan)")
        # 4. Docker and images
        session_runner: SessionRunner
        if opts.runner == "fake":
            session_runner = FakeSessionRunner(calls=2, model=model)
        else:
            console.print(
                "[bold]docker[/] ensuring the engine and the agents image (the first build takes minutes)"
            )
            ensure_docker()
            image = opts.image or build_image(lambda line: console.print(f"  {line}"))
            session_runner = SandboxSessionRunner(
                image=image, model=model, time_limit_s=opts.session_timeout_s
            )
        # 5. run
        runner = Runner(
            sessions,
            session_runner,
            RunConfig(
                proxy_url=proxy, data_dir=opts.data_dir, concurrency=opts.concurrency, limit=opts.limit
            ),
        )
        progress = Progress(console, proxy_url=proxy)
        with progress.live():
            stats = runner.run(on_tick=progress.tick)
        progress.final(runner)
        summary["run"] = {"done": stats.done, "agent_failed": stats.agent_failed,
                          "infra_failed": stats.infra_failed, "retries": stats.infra_retries}  # fmt: skip
    # 6. the proxy is stopped: roll what it left in its spool, then export
    roll_calls(opts.data_dir)
    out = opts.data_dir / "dataset"
    es = export(sessions, opts.data_dir, out, held_out=opts.held_out)
    summary["dataset"] = str(out)
    summary["export"] = {"sessions": es.sessions, "calls": es.calls, "by_agent_lang": es.by_cell,
                         "secrets": dict(es.secrets), "duplicates_dropped": es.duplicates_dropped}  # fmt: skip
    summary["elapsed_s"] = round(time.monotonic() - t0, 1)
    summary["queue"] = queue.counts(sessions)
    print_summary(console, summary, es)
    return summary


def print_summary(console: Console, summary: dict[str, object], es: object) -> None:
    from factory.publish.export import ExportStats

    assert isinstance(es, ExportStats)
    t = Table(title=f"harvest done in {summary['elapsed_s']} s · dataset: {summary['dataset']}")
    for col in ("agent", "language", "sessions", "calls", "prompt tokens", "completion tokens"):
        t.add_column(col, justify="right" if col not in ("agent", "language") else "left")
    for cell, c in sorted(es.by_cell.items()):
        agent, lang = cell.split("/")
        t.add_row(
            agent,
            lang,
            str(c["sessions"]),
            str(c["calls"]),
            f"{c['prompt_tokens']:,}",
            f"{c['completion_tokens']:,}",
        )
    tot = es.totals()
    t.add_row(
        "all",
        "",
        str(tot["sessions"]),
        str(tot["calls"]),
        f"{tot['prompt_tokens']:,}",
        f"{tot['completion_tokens']:,}",
    )
    console.print(t)
    console.print(f"queue: {summary['queue']}  ·  secrets scrubbed: {dict(es.secrets) or 'none'}")
