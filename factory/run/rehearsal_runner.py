"""The rehearsal agent (`--runner rehearsal-agent`): a session runner without Docker that behaves like a coding
agent towards the proxy — it speaks its agent's API (Messages, Responses or Chat, streamed), runs each shell
call it is given in a scratch checkout of the base commit (a subprocess with a time limit, no sandbox: it is
meant for the scripted brain's own commands), sends the output back, and goes on until the model stops
calling tools. Like the CLIs it retries a call the proxy could not answer (a proxy restarting, a full disk)
for a while before it gives up, and it logs every call the proxy acknowledged, so a rehearsal can count
acknowledged calls that were lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from factory.run.rehearsal_dialects import DIALECTS, Dialect
from factory.run.runner_types import InfraError, RunnerArgs, SessionOutcome, SessionSpec
from records import session_prefix


class RehearsalAgentSettings(BaseSettings):
    """How the rehearsal agent behaves (environment DFLASH_REHEARSAL_*: set by `factory rehearse`)."""

    model_config = SettingsConfigDict(env_prefix="DFLASH_REHEARSAL_")

    max_turns: int = Field(default=80, ge=1, description="Model calls after which a session stops.")
    output_bytes: int = Field(default=6000, ge=100, description="A tool output is cut to this many bytes.")
    command_timeout_s: float = Field(default=60.0, gt=0, description="Seconds a tool command may run.")
    retry_s: float = Field(default=120.0, ge=0, description="Seconds a failed call is retried for.")
    ack_log: Path | None = Field(default=None, description="Folder of the acknowledged-call logs.")


class _Unanswered(InfraError):
    """The proxy did not answer this call (connection refused, 5xx): retried."""


@dataclass
class _Ack:
    """One line per acknowledged call (and per session end), fsynced: a killed runner loses none it logged."""

    folder: Path | None

    def log(self, **fields: Any) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / f"{os.getpid()}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(fields) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)


class RehearsalSessionRunner:
    def __init__(self, model: str, settings: RehearsalAgentSettings | None = None) -> None:
        self.model, self.cfg = model, settings or RehearsalAgentSettings()
        self.acks = _Ack(self.cfg.ack_log)

    @classmethod
    def from_args(cls, args: RunnerArgs) -> RehearsalSessionRunner:
        return cls(args.model)

    def _call(self, http: httpx.Client, url: str, dialect: Dialect, session: str) -> dict[str, Any]:
        @retry(
            retry=retry_if_exception_type(_Unanswered),
            wait=wait_exponential(multiplier=0.25, max=8),
            stop=stop_after_delay(self.cfg.retry_s),
            reraise=True,
        )
        def send() -> dict[str, Any]:
            try:
                r = http.post(url + dialect.path, json=dialect.request(), headers=dialect.headers(session))
            except httpx.HTTPError as exc:
                raise _Unanswered(f"{type(exc).__name__}: {exc}") from exc
            if r.status_code >= 500 or r.status_code == 429:
                raise _Unanswered(f"proxy answered {r.status_code}: {r.text[:200]}")
            if r.status_code != 200:
                raise InfraError(f"proxy refused the call ({r.status_code}): {r.text[:300]}")
            body = dialect.assemble(r.content)
            if body is None:
                raise _Unanswered("the stream ended with an error event, or did not assemble")
            return body

        try:
            return send()
        except _Unanswered as exc:
            raise InfraError(f"no answer after {self.cfg.retry_s:.0f} s: {exc}") from exc

    def _run_tool(self, command: str, cwd: Path) -> str:
        try:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=cwd,
                capture_output=True,
                timeout=self.cfg.command_timeout_s,
                stdin=subprocess.DEVNULL,
            )
            out = (done.stdout + done.stderr).decode("utf-8", "replace")
            out += f"\n[exit {done.returncode}]"
        except subprocess.TimeoutExpired:
            out = f"[timed out after {self.cfg.command_timeout_s:g} s]"
        return out[-self.cfg.output_bytes :]

    def run(self, spec: SessionSpec) -> SessionOutcome:
        work = Path(tempfile.mkdtemp(prefix=f"rehearsal-{spec.proxy_session_id[:12]}-"))
        try:
            outcome = self._session(spec, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        # the end is logged last, as the runner takes the result: a stop between the two (the runner's
        # give_back) would release a session whose agent had ended, and it would run again
        turns = sum(e["type"] == "assistant" for e in outcome.transcript)
        self.acks.log(
            session=spec.proxy_session_id, finished=spec.session_id, attempt=spec.attempt, turns=turns
        )
        return outcome

    def _checkout(self, spec: SessionSpec, work: Path) -> None:
        archive = subprocess.run(
            ["git", "-C", str(spec.repo_path), "archive", spec.base_commit], capture_output=True, timeout=120
        )
        if archive.returncode != 0:
            raise InfraError(f"git archive {spec.base_commit}: {archive.stderr.decode()[-300:]}")
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive.stdout, check=True, timeout=120)
        for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base", "--no-gpg-sign"]):
            env = {**os.environ, "GIT_AUTHOR_NAME": "r", "GIT_AUTHOR_EMAIL": "r@r", "GIT_COMMITTER_NAME": "r"}
            env["GIT_COMMITTER_EMAIL"] = "r@r"
            subprocess.run(["git", *argv], cwd=work, check=True, capture_output=True, env=env, timeout=60)

    def _session(self, spec: SessionSpec, work: Path) -> SessionOutcome:
        self._checkout(spec, work)
        dialect = DIALECTS[spec.agent](self.model, spec.task)
        url = spec.proxy_url.rstrip("/") + session_prefix(spec.proxy_session_id)
        transcript: list[dict[str, object]] = [{"type": "task", "text": spec.task}]
        started, turns = time.monotonic(), 0
        with httpx.Client(timeout=httpx.Timeout(300, connect=10)) as http:
            while turns < self.cfg.max_turns:
                body = self._call(http, url, dialect, spec.proxy_session_id)
                turns += 1
                self.acks.log(session=spec.proxy_session_id, turn=turns)
                step = dialect.read(body)
                transcript.append({"type": "assistant", "text": step.text, "command": step.command})
                if step.command is None:
                    break
                output = self._run_tool(step.command, work)
                transcript.append({"type": "tool", "output": output[-500:]})
                dialect.answer(step, output)
        patch = subprocess.run(["git", "diff"], cwd=work, capture_output=True, text=True, timeout=60).stdout
        return SessionOutcome(
            exit_status=0 if turns < self.cfg.max_turns else 1,
            patch=patch,
            transcript=transcript,
            agent_session_id=spec.proxy_session_id,
            error=None if turns < self.cfg.max_turns else f"stopped after {turns} turns",
            timings={"session_s": round(time.monotonic() - started, 3)},
        )
