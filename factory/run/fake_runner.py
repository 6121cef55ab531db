"""A scripted `SessionRunner` (no Docker): for tests, demos and dry runs of the whole pipeline.

It can sleep, fail with infrastructure errors on chosen attempts, append one JSON line per start and
per finish to a log file (so tests can count runs across processes), and make real model calls
through the proxy under ``/s/{proxy_session_id}`` so the export sees calls exactly as an agent's."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from factory.run.runner_types import InfraError, RunnerArgs, SessionOutcome, SessionSpec
from records import session_prefix


class FakeRunnerSettings(BaseSettings):
    """How `--runner fake` behaves inside `harvest`/`run` (environment only: it is a test and demo aid)."""

    model_config = SettingsConfigDict(env_prefix="DFLASH_FAKE_RUNNER_")

    calls: int = Field(default=2, ge=0, description="Chat completions per session, through the proxy.")
    sleep_s: float = Field(default=0.0, ge=0, description="Seconds each session lasts after its calls.")
    log_path: Path | None = Field(
        default=None, description="Append one JSON line per session start and finish."
    )


@dataclass
class FakeSessionRunner:
    sleep_s: float = 0.0
    log_path: Path | None = None
    infra_failures: dict[str, int] = field(default_factory=dict)  # session id -> attempts that fail
    calls: int = 0  # chat completions to make through the proxy per session
    model: str = "target"
    user_message: str | None = None  # what to send; default: the task text
    exit_status: int = 0

    @classmethod
    def from_args(cls, args: RunnerArgs) -> FakeSessionRunner:
        env = FakeRunnerSettings()
        return cls(sleep_s=env.sleep_s, log_path=env.log_path, calls=env.calls, model=args.model)

    def _log(self, event: str, spec: SessionSpec) -> None:
        if self.log_path is None:
            return
        line = json.dumps(
            {"event": event, "session": spec.session_id, "attempt": spec.attempt, "pid": os.getpid()}
        )
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def run(self, spec: SessionSpec) -> SessionOutcome:
        self._log("start", spec)
        if spec.attempt <= self.infra_failures.get(spec.session_id, 0):
            self._log("infra_error", spec)
            raise InfraError(f"scripted infrastructure failure on attempt {spec.attempt}")
        transcript: list[dict[str, object]] = [{"type": "task", "text": spec.task}]
        base = spec.proxy_url.rstrip("/") + session_prefix(spec.proxy_session_id) + "/v1"
        messages: list[dict[str, str]] = [{"role": "user", "content": self.user_message or spec.task}]
        for _ in range(self.calls):
            r = httpx.post(
                f"{base}/chat/completions",
                json={"model": self.model, "messages": messages, "max_tokens": 16, "temperature": 0},
                headers={"User-Agent": "fake-agent/1.0", "x-session-id": f"ses_{spec.proxy_session_id}"},
                timeout=120,
            )
            if r.status_code >= 500:
                raise InfraError(f"proxy answered {r.status_code}")
            content = r.json()["choices"][0]["message"]["content"] or ""
            transcript.append({"type": "assistant", "text": content})
            messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "continue"}]
        time.sleep(self.sleep_s)
        self._log("finish", spec)
        return SessionOutcome(
            exit_status=self.exit_status,
            patch=f"diff --git a/FIX b/FIX\n+fixed {spec.session_id}\n",
            transcript=transcript,
            agent_session_id=f"fake-{spec.proxy_session_id}",
        )
