"""What the runner hands a session runner and gets back: the `SessionRunner` protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from factory.errors import FactoryError
from records.agents import AgentName

# The session runners' names, one owner (factory/run/runners.py maps them to classes): every option that
# takes a runner is typed by `RunnerName` and defaults to `SANDBOX`; no other module spells a name
# (tests/test_runner_names.py).
RunnerName = Literal["sandbox", "fake", "rehearsal-agent"]
SANDBOX: RunnerName = "sandbox"  # each agent in a confined Docker sandbox
FAKE: RunnerName = "fake"  # scripted sessions without Docker (tests, dry runs)
REHEARSAL: RunnerName = "rehearsal-agent"  # an agent-like loop without Docker, for a campaign's rehearsal


class InfraError(FactoryError, RuntimeError):
    """The session could not run for a reason outside the agent (Docker, git, network): retried."""


@dataclass(frozen=True)
class SessionSpec:
    session_id: str  # the factory's session id
    proxy_session_id: str  # /s/{this} on the proxy: unique per attempt
    attempt: int
    agent: AgentName
    lang: str
    repo_name: str
    repo_path: Path  # a local git repository holding base_commit
    base_commit: str
    task: str
    proxy_url: str  # the proxy as the host sees it
    setup_hint: str | None = None  # repos.yaml `setup:` (its trailing test steps become the test command)
    repo_language: str | None = None  # the registry's language: picks the toolchain when build files do not
    test_command: str | None = None  # repos.yaml `test:`: wins over the hint's test steps and detection


@dataclass
class SessionOutcome:
    """An agent ran to its end (whatever its exit status)."""

    exit_status: int | None
    patch: str
    transcript: list[dict[str, Any]]
    agent_session_id: str | None
    error: str | None = None  # the agent's failure (timeout, OOM, exit code), not an infra failure
    timings: dict[str, float] = field(default_factory=dict)
    # The repository's tests before and after the patch, `resolved`, the environment's setup and egress
    # (keys: baseline, after, resolved, environment); None when the runner ran no tests.
    tests: dict[str, Any] | None = None


class SessionRunner(Protocol):
    def run(self, spec: SessionSpec) -> SessionOutcome:
        """Run one session; raise InfraError (or anything else) when the infrastructure failed."""
        ...


@dataclass(frozen=True)
class RunnerArgs:
    """What every session runner is built from (`factory.run.runners.get_runner`)."""

    model: str = "target"  # the model id the agents ask for
    image: str | None = None  # agents image; None: build or find it
    time_limit_s: float | None = None  # seconds an agent may run
    run_id: str | None = None  # labels its sandboxes (reaped by this id once the run is dead)
    command: str | None = None  # a shell command to run in each sandbox instead of the agent
    egress: Literal["none", "registries"] | None = None  # sandbox egress; None: DFLASH_SANDBOX_EGRESS's
