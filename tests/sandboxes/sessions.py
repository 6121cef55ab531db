"""Session requests the sandbox tests make, and what a succeeded or failed session must show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandboxes.session import SessionRequest, SessionResult
from tests.fakes.scripted_policy import PROOF_FILE, PROOF_TEXT
from tests.sandboxes.conftest import leftovers

NO_MODEL = "http://127.0.0.1:9"  # the command agent talks to no model
NOTHING_LEFT: dict[str, list[str]] = {"containers": [], "networks": [], "rules": []}
TASKS = {
    "en": f"Create the file {PROOF_FILE} using the shell tool, then say done.",
    "ko": f"셸 도구로 {PROOF_FILE} 파일을 만든 다음 완료라고 말하세요.",
}


def command_request(
    repo: tuple[Path, str], command: str, *, task: str = "", proxy_url: str = NO_MODEL, **fields: Any
) -> SessionRequest:
    """The `command` pseudo-agent running `command` in `repo` (path, commit); `fields` are the request's rest."""
    path, commit = repo
    return SessionRequest(
        agent="command", repo=path, commit=commit, task=task, proxy_url=proxy_url, command=command, **fields
    )


def scripted_request(
    agent: str,
    repo: tuple[Path, str],
    proxy_url: str,
    image: str,
    *,
    task: str = TASKS["en"],
    model: str = "scripted",
    **fields: Any,
) -> SessionRequest:
    """A real agent CLI in `repo` (path, commit), on a model of the scripted upstream; `fields` are the rest."""
    path, commit = repo
    return SessionRequest(
        agent=agent,
        repo=path,
        commit=commit,
        task=task,
        proxy_url=proxy_url,
        image=image,
        model=model,
        **fields,
    )


def check_result(result: SessionResult) -> None:
    """The agent made the scripted proof file, and the session recorded what it did."""
    assert result.status == "succeeded", (result.reason, result.stderr[-2000:])
    assert result.exit_code == 0
    assert f"+++ b/{PROOF_FILE}" in result.patch, result.patch
    assert PROOF_TEXT in result.patch, result.patch
    assert result.agent_session_id, "the agent's own session id is read from its transcript"
    assert result.transcript
    assert all(isinstance(e, dict) for e in result.transcript)
    for step in ("network", "create", "start", "copy_repo", "agent", "patch", "teardown", "total"):
        assert result.timings[step] >= 0, step


def check_failed(result: SessionResult, why: str, client: Any, run_id: str) -> None:
    """The session failed for the reason starting with `why`, and its sandbox left nothing behind."""
    assert result.status == "failed", (result.reason, result.stderr)
    assert result.reason, (result.reason, result.stderr)
    assert result.reason.startswith(why), (result.reason, result.stderr)
    assert leftovers(client, run_id) == NOTHING_LEFT


def patched_files(result: SessionResult) -> list[str]:
    """The `+++ b/<path>` line of each file the session's patch changes."""
    return [line for line in result.patch.splitlines() if line.startswith("+++ ")]
