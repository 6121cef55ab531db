"""Session runners by name (`--runner`): a name → class mapping, like the agents' `get_agent`; and the
options of `factory run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from factory.run.fake_runner import FakeSessionRunner
from factory.run.rehearsal_runner import RehearsalSessionRunner
from factory.run.runner import RunConfig
from factory.run.runner_types import FAKE, REHEARSAL, SANDBOX, RunnerArgs, RunnerName, SessionRunner
from factory.run.sandbox_runner import SandboxSessionRunner

RUNNERS: dict[
    RunnerName, type[SandboxSessionRunner] | type[FakeSessionRunner] | type[RehearsalSessionRunner]
] = {
    SANDBOX: SandboxSessionRunner,
    FAKE: FakeSessionRunner,
    REHEARSAL: RehearsalSessionRunner,
}


def get_runner(name: str, args: RunnerArgs) -> SessionRunner:
    try:
        cls = RUNNERS[name]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"unknown runner {name!r}; choose one of {', '.join(RUNNERS)}") from None
    return cls.from_args(args)


def uses_sandboxes(name: str) -> bool:
    return RUNNERS.get(name) is SandboxSessionRunner  # type: ignore[call-overload]


def _run_default(name: str) -> Any:
    return RunConfig.model_fields[name].default


# Ray's nodes build their own session runners (factory.run.ray_node), from their own environment.
RAY_EGRESS = "--egress applies to this host's sandboxes; with --ray set DFLASH_SANDBOX_EGRESS on the nodes"


class EgressOption(BaseModel):
    """The sandboxes' network policy, shared by `run` and `harvest`."""

    egress: Literal["none", "registries"] | None = Field(
        default=None,
        description="What a sandbox reaches besides the proxy: none, or registries (PyPI, npm, crates, Go, "
        "Maven Central, Debian through a squid of its own); unset: DFLASH_SANDBOX_EGRESS, else none.",
    )


class RunOptions(EgressOption):
    """`factory run`'s options; the runner's defaults are RunConfig's own."""

    concurrency: int = Field(
        default=_run_default("concurrency"), ge=1, description="Worker threads, one session each."
    )
    limit: int | None = Field(default=None, ge=0, description="Sessions to run in this invocation.")
    runner: RunnerName = Field(default=SANDBOX, description="sandbox, or fake (no Docker: scripted calls).")
    image: str | None = Field(default=None, description="Agents image (default: build or find).")
    model: str = Field(default="target", description="Model id the agents ask for.")
    session_timeout: float | None = Field(default=None, gt=0, description="Seconds an agent may run.")
    lease: float = Field(
        default=_run_default("lease_s"), gt=0, description="Lease seconds (renewed while running)."
    )
    max_attempts: int = Field(
        default=_run_default("max_attempts"), ge=1, description="Attempts before a session fails."
    )
    backoff: float = Field(
        default=_run_default("backoff_s"),
        ge=0,
        description="First retry delay after an infrastructure failure.",
    )
    wait: bool = Field(default=False, description="Keep polling while other workers hold sessions.")

    def config(self, proxy_url: str, data_dir: Path) -> RunConfig:
        return RunConfig(
            proxy_url=proxy_url,
            data_dir=data_dir,
            concurrency=self.concurrency,
            limit=self.limit,
            lease_s=self.lease,
            max_attempts=self.max_attempts,
            backoff_s=self.backoff,
            wait_for_others=self.wait,
        )
