"""The one place the factory touches the sandboxes package: a `SessionRunner` that runs each
session's agent in a confined Docker sandbox (`sandboxes.session.run_session`)."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from factory.run.runner_types import InfraError, RunnerArgs, SessionOutcome, SessionSpec

if TYPE_CHECKING:  # the sandboxes package (and docker) load only when a sandbox runs
    from sandboxes.session import SessionRequest

log = logging.getLogger(__name__)

ENSURE_ENGINE = Path(__file__).resolve().parents[2] / "sandboxes" / "images" / "ensure_engine.sh"


def ensure_docker() -> None:
    """Install/start the Docker engine where we may (Debian, root), else fail with instructions."""
    r = subprocess.run(["bash", str(ENSURE_ENGINE)], capture_output=True, text=True)
    if r.returncode != 0:
        raise InfraError(f"Docker engine unavailable:\n{r.stdout}{r.stderr}".strip())
    log.info(r.stdout.strip())


def docker_client() -> Any:
    import docker

    return docker.from_env()


def build_image(log_line: Any = print) -> str:
    """The agents image tag, building the base and agents images when they are missing."""
    import docker

    from sandboxes.config import SandboxSettings
    from sandboxes.images.build import build_agents

    return build_agents(docker.from_env(), SandboxSettings(), log=log_line)


def session_commands(spec: SessionSpec) -> tuple[str | None, str | None]:
    """(setup, test) for a session's environment; None leaves it to detection from the build files.

    The test command is repos.yaml's `test:` when given, else the trailing test steps of its `setup:` hint."""
    from sandboxes.detect import split_hint

    setup, hinted_test = split_hint(spec.setup_hint)
    return setup, spec.test_command or hinted_test


class SandboxSessionRunner:
    def __init__(
        self,
        *,
        image: str | None = None,
        model: str = "target",
        time_limit_s: float | None = None,
        run_id: str | None = None,
        command: str | None = None,
        egress: Literal["none", "registries"] | None = None,
    ) -> None:
        import docker

        from sandboxes.config import SandboxSettings

        # An explicit policy wins over DFLASH_SANDBOX_EGRESS (no os.environ change: other runners keep theirs).
        settings = SandboxSettings()
        self.settings = settings.model_copy(update={"egress": egress}) if egress else settings
        self._client = docker.from_env()
        self.image = image
        self.model = model
        self.time_limit_s = time_limit_s
        self.run_id = run_id or f"factory-{socket.gethostname()}-{os.getpid()}"
        self.command = command  # `{session}` in it becomes the attempt's proxy session id
        self._image_lock = threading.Lock()

    @classmethod
    def from_args(cls, args: RunnerArgs) -> SandboxSessionRunner:
        return cls(**dataclasses.asdict(args))  # RunnerArgs's fields are this constructor's keywords

    def _image(self) -> str:
        with self._image_lock:
            if self.image is None:
                from sandboxes.images.build import build_agents

                self.image = build_agents(self._client, self.settings, log=log.info)
            return self.image

    def request(self, spec: SessionSpec) -> SessionRequest:
        """The sandbox session of `spec`: its image (the repository's environment image), tests and agent."""
        from sandboxes.session import SessionRequest

        env = {"image": self._image(), **self._environment(spec)}
        return SessionRequest(
            agent=spec.agent,
            repo=spec.repo_path,
            commit=spec.base_commit,
            task=spec.task,
            proxy_url=spec.proxy_url,
            session_id=spec.proxy_session_id,
            run_id=self.run_id,
            model=self.model,
            time_limit_s=self.time_limit_s,
            settings=self.settings,
            command=self.command.replace("{session}", spec.proxy_session_id) if self.command else None,
            **env,
        )

    def run(self, spec: SessionSpec) -> SessionOutcome:
        import docker
        import requests

        from sandboxes.session import run_session

        req = self.request(spec)
        try:
            res = run_session(req, self._client)
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            raise InfraError(f"sandbox: {type(exc).__name__}: {exc}") from exc
        except subprocess.CalledProcessError as exc:
            raise InfraError(f"sandbox: {exc}; {(exc.stderr or '')[-500:]}") from exc
        return SessionOutcome(
            exit_status=res.exit_code,
            patch=res.patch,
            transcript=res.transcript,
            agent_session_id=res.agent_session_id,
            error=res.reason,
            timings=res.timings,
            tests=None
            if res.baseline is None and res.setup is None
            else {
                "baseline": res.baseline,
                "after": res.after,
                "resolved": res.resolved,
                "environment": {"setup": res.setup, "egress": res.egress},
            },
        )

    def _environment(self, spec: SessionSpec) -> dict[str, Any]:
        """The session's environment image, test command and egress (issue 14); none for a debug command."""
        if not self.settings.env_images or self.command:
            return {}
        from sandboxes.environment import prepare

        setup, test = session_commands(spec)
        prepared = prepare(
            self._client,
            self.settings,
            self._image(),
            spec.repo_path,
            spec.base_commit,
            repo_id=spec.repo_name,
            setup=setup,
            test=test,
            language=spec.repo_language,
        )
        return prepared.request_fields()
