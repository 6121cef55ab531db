"""Run one factory session: a sandbox, one agent CLI (or a debug command) inside it, and its result."""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import docker

from records import session_prefix
from sandboxes import testrun
from sandboxes.agents import AgentContext, get_agent
from sandboxes.agents.base import Agent, parse_jsonl
from sandboxes.config import SandboxSettings
from sandboxes.egress import build_egress_image
from sandboxes.files import tar_files
from sandboxes.sandbox import AGENT_UID, ExecResult, Sandbox, SandboxSpec
from sandboxes.testrun import TestOutcome


@dataclass
class SessionResult:
    run_id: str
    session_id: str
    agent: str
    status: str  # "succeeded" or "failed"
    reason: str | None
    exit_code: int | None
    agent_session_id: str | None
    patch: str
    transcript: list[dict[str, Any]] = field(default_factory=list)
    stderr: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    peak_memory_mb: float | None = None
    # The repository's tests before the agent and after its patch (None: no test command), and whether the
    # patch newly made failing tests pass; the environment's setup; each request through the egress proxy.
    baseline: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    resolved: bool | None = None
    setup: dict[str, Any] | None = None
    egress: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SessionRequest:
    agent: str  # an adapter name, or "command" with `command` set
    repo: Path
    commit: str
    task: str
    proxy_url: str
    image: str
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    run_id: str = field(default_factory=lambda: f"try-{uuid.uuid4().hex[:8]}")
    model: str = "target"
    command: str | None = None
    time_limit_s: float | None = None
    settings: SandboxSettings = field(default_factory=lambda: SandboxSettings())
    test_command: str | None = None  # run before the agent and after its patch, as the agent user
    egress_image: str | None = None  # the squid image: with it the sandbox reaches the registries
    prepared_base: str | None = None  # `image` is an environment image holding the checkout at this commit
    setup: dict[str, Any] | None = None  # how the environment was prepared (copied into the result)


# Untracked files a test run leaves (caches, build output) must not end up in the agent's patch.
EXCLUDE_NEW = "mkdir -p .git/info && git ls-files --others --exclude-standard --directory | sed 's|^|/|' >> .git/info/exclude"


def _tests(box: Sandbox, command: str, limit: float) -> TestOutcome:
    res = box.exec(["sh", "-c", command], timeout=limit)
    out = testrun.parse(command, res.exit_code, (res.stdout + res.stderr).decode(errors="replace"))
    out.timed_out, out.seconds = res.timed_out, round(res.seconds, 3)
    return out


def _reason(res: ExecResult, limit: float, memory: str) -> str | None:
    if res.timed_out:
        return f"timeout: exceeded the {limit:.0f} s time limit"
    if res.oom_killed:
        return f"oom: killed for exceeding the {memory} memory limit"
    if res.exit_code != 0:
        return f"exit code {res.exit_code}"
    return None


def _agent_command(
    box: Sandbox, req: SessionRequest, agent: Agent | None, settings: SandboxSettings
) -> tuple[dict[str, str], list[str]]:
    """(environment, argv) of the agent's headless run, its config files put in its home first."""
    home = f"/home/{settings.user}"
    if agent is None:
        return {"HOME": home, "DFLASH_PROXY_URL": box.proxy_url}, ["sh", "-c", str(req.command)]
    ctx = AgentContext(
        base_url=box.proxy_url + session_prefix(req.session_id),
        api_key=f"dflash-{req.session_id[:12]}-{secrets.token_hex(8)}",
        model=req.model,
        task=req.task,
        home=home,
        workdir=settings.workdir,
    )
    files = agent.files(ctx)
    if files:
        box.container.put_archive("/", tar_files(files, AGENT_UID, owned_below=home))  # type: ignore[union-attr]
    return agent.env(ctx), agent.command(ctx)


def run_session(req: SessionRequest, client: docker.DockerClient | None = None) -> SessionResult:
    """Run the session to its end; the sandbox is torn down whatever happens."""
    settings = req.settings
    limit = min(req.time_limit_s or settings.wall_time_s, settings.wall_time_s)
    if req.time_limit_s:
        # The sandbox's own wall time covers setup and patch collection on top of the agent's limit.
        tests = 2 * settings.test_time_limit_s if req.test_command else 0
        settings = settings.model_copy(update={"wall_time_s": req.time_limit_s + 120 + tests})
    client = client or docker.from_env()
    egress_image = req.egress_image
    if egress_image is None and settings.egress == "registries":
        egress_image = build_egress_image(client, settings)
    spec = SandboxSpec(
        req.run_id,
        req.session_id,
        req.repo,
        req.commit,
        req.proxy_url,
        req.image,
        settings,
        egress_image=egress_image,
        prepared_base=req.prepared_base,
    )
    baseline = after = None
    t0 = time.monotonic()
    name = "command" if req.command else req.agent
    agent = None if req.command else get_agent(req.agent)  # a bad name fails before any container exists
    with Sandbox(spec, client) as box:
        if req.test_command:
            t = time.monotonic()
            baseline = _tests(box, req.test_command, settings.test_time_limit_s)
            box.exec(["sh", "-c", EXCLUDE_NEW], timeout=60)
            box.timings["baseline_tests"] = round(time.monotonic() - t, 4)
        env, cmd = _agent_command(box, req, agent, settings)
        res = box.exec(cmd, env=env, timeout=limit)
        box.timings["agent"] = round(res.seconds, 4)
        reason = _reason(res, limit, settings.memory)
        if res.exit_code != 0:
            box.kill_leftovers()
        patch, peak = b"", box.memory_peak_mb()
        if not box.expired:
            t = time.monotonic()
            patch = box.patch()
            box.timings["patch"] = round(time.monotonic() - t, 4)
            if req.test_command:
                # After the patch was taken, so the run's own leftovers stay out of it.
                after = _tests(box, req.test_command, settings.test_time_limit_s)
                box.timings["after_tests"] = round(after.seconds, 4)
        stdout = res.stdout.decode(errors="replace")
        events = parse_jsonl(stdout) if agent else [{"raw": line} for line in stdout.splitlines()]
        result = SessionResult(
            run_id=req.run_id,
            session_id=req.session_id,
            agent=name,
            status="failed" if reason else "succeeded",
            reason=reason,
            exit_code=res.exit_code,
            agent_session_id=agent.session_id(events) if agent else None,
            # Binary changes are base85 in the patch; only non-UTF-8 text files can lose bytes here.
            patch=patch.decode(errors="replace"),
            transcript=events,
            stderr=res.stderr.decode(errors="replace")[-20000:],
            timings=box.timings,
            peak_memory_mb=peak,
            baseline=baseline.to_dict() if baseline else None,
            after=after.to_dict() if after else None,
            resolved=testrun.resolved(baseline, after),
            setup=req.setup,
            egress=[asdict(h) for h in box.egress.hits()] if box.egress else [],
        )
    result.timings["total"] = round(time.monotonic() - t0, 4)
    return result
