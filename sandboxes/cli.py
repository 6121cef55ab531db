"""`python -m sandboxes build | gc | env-gc | try`: build images, remove what dead owners left, try one session.

Each command's options are generated from its settings model below (clikit): the defaults live in the
models only, and a bad value is named with its option. A factory run's own leftovers (its processes,
ledger and spool) are reaped by `python -m factory reap`."""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal

import docker
import typer
from docker.errors import ImageNotFound
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from clikit import settings_command
from records.agents import AGENT_NAMES, AgentName
from sandboxes.config import SandboxSettings
from sandboxes.envimage import gc_env_images
from sandboxes.environment import prepare
from sandboxes.errors import SandboxInputError
from sandboxes.gc import collect
from sandboxes.images.build import build_agents
from sandboxes.session import SessionRequest, run_session

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0])


class GcOptions(BaseModel):
    run: str | None = Field(None, description="Only this run id's sandboxes.")
    all: bool = Field(False, description="Also what live runs hold (e.g. before CI).")
    dry_run: bool = Field(False, description="Only list what would be removed.")


class EnvGcOptions(BaseModel):
    max_age_days: float | None = Field(
        None, gt=0, description="Remove images older than this; unset: DFLASH_SANDBOX_ENV_MAX_AGE_DAYS."
    )
    budget_gb: float | None = Field(
        None, gt=0, description="Then the oldest over this total; unset: DFLASH_SANDBOX_ENV_BUDGET_GB."
    )
    repo: str | None = Field(None, description="Only this repository's images (its registry name).")
    dry_run: bool = Field(False, description="Only list what would be removed.")

    def sandbox_settings(self) -> SandboxSettings:
        """The sandbox settings (environment included) with the limits given here in their place."""
        given = {"env_max_age_days": self.max_age_days, "env_budget_gb": self.budget_gb}
        return SandboxSettings().model_copy(update={k: v for k, v in given.items() if v is not None})


class TryOptions(BaseModel):
    agent: AgentName = Field(AgentName.CLAUDE_CODE, description=f"The agent CLI ({', '.join(AGENT_NAMES)}).")
    egress: Literal["none", "registries"] | None = Field(
        None, description="Network policy (none, registries); unset: DFLASH_SANDBOX_EGRESS."
    )
    env: bool = Field(False, description="Run in the repository's environment image, with its tests.")
    setup: str | None = Field(
        None, description="Setup command for --env; unset: detected from the build files."
    )
    test: str | None = Field(None, description="Test command for --env; unset: detected.")
    repo: Path = Field(description="The repository (a local git checkout).")
    commit: str = Field(description="Base commit (any git revision).")
    # `command` comes before `task`: the task's check below reads it.
    command: str | None = Field(
        None, description="Run this shell command inside instead of an agent (debug confinement)."
    )
    task: str = Field("", validate_default=True, description="The task, in English or Korean.")
    proxy: str = Field(description="The proxy's URL as the host sees it, e.g. http://127.0.0.1:8100.")
    session: str | None = Field(None, description="Session id; unset: a new uuid.")
    run: str | None = Field(None, description="Run id for the labels; unset: try-<random>.")
    model: str = Field("target", description="Model name the agent asks the proxy for.")
    time_limit: float | None = Field(
        None, gt=0, description="Seconds the agent may run; unset: the sandbox wall time."
    )
    image: str | None = Field(None, description="Agents image tag; unset: build or find the current one.")
    compact: bool = Field(False, description="Print the JSON on one line.")

    @field_validator("task")
    @classmethod
    def _task_or_command(cls, task: str, info: ValidationInfo) -> str:
        if not task and not info.data.get("command"):
            raise SandboxInputError("a task is needed (or --command)")
        return task


def _client() -> docker.DockerClient:
    return docker.from_env()


def _log(line: str) -> None:
    typer.echo(line, err=True)


@app.command()
def build() -> None:
    """Build (or find) the base and agents images; prints the agents tag."""
    typer.echo(build_agents(_client(), SandboxSettings(), log=_log))


@app.command()
@settings_command(GcOptions)
def gc(
    settings: GcOptions,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
) -> None:
    """Remove containers, networks and firewall rules whose owner is dead (by label, pid and start time)."""
    report = collect(_client(), run_id=settings.run, everything=settings.all, dry_run=settings.dry_run)
    if as_json:
        typer.echo(json.dumps(asdict(report)))
        return
    for line in report.lines("would remove" if settings.dry_run else "removed"):
        typer.echo(line)
    if report.empty():
        typer.echo("nothing left by dead owners")


@app.command("env-gc")
@settings_command(EnvGcOptions)
def env_gc(settings: EnvGcOptions) -> None:
    """Remove environment images past their age, then the oldest over budget."""
    removed = gc_env_images(
        _client(), settings.sandbox_settings(), dry_run=settings.dry_run, repo_id=settings.repo
    )
    verb = "would remove" if settings.dry_run else "removed"
    for tag in removed:
        typer.echo(f"{verb} {tag}")
    typer.echo(f"{verb}: {len(removed)} environment images")


@app.command("try")
@settings_command(TryOptions)
def try_(settings: TryOptions) -> None:
    """Run one session and print its result as JSON (exit 0 when the agent succeeded, 1 otherwise)."""
    sandbox = SandboxSettings()
    if settings.egress:
        sandbox = sandbox.model_copy(update={"egress": settings.egress})
    client = _client()
    image = settings.image or build_agents(client, sandbox, log=_log)
    req = SessionRequest(
        agent=settings.agent.value,
        repo=settings.repo.resolve(),
        commit=settings.commit,
        task=settings.task,
        proxy_url=settings.proxy,
        image=image,
        model=settings.model,
        command=settings.command,
        time_limit_s=settings.time_limit,
        settings=sandbox,
    )
    if settings.env:
        # The repository's environment image, test command and setup outcome (docs/sandboxes.md).
        prepared = prepare(
            client, sandbox, image, req.repo, settings.commit, setup=settings.setup, test=settings.test
        )
        for key, value in prepared.request_fields().items():
            setattr(req, key, value)
    if settings.session:
        req.session_id = settings.session
    if settings.run:
        req.run_id = settings.run
    # SIGTERM would end Python without running `finally`: turn it into SystemExit so teardown runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result = run_session(req, client)
    except (ValueError, ImageNotFound) as exc:  # bad input: an unknown revision, agent, image or proxy URL
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(result.to_dict(), ensure_ascii=False, indent=None if settings.compact else 1))
    raise typer.Exit(0 if result.status == "succeeded" else 1)


def main() -> None:
    app(prog_name="python -m sandboxes")
