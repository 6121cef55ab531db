"""The session queue in the database: claims with expiring leases, heartbeats, results, retries.

A claim is one transaction: pick the next claimable session (`pending` and due, or `running` with an
expired lease: its worker died) with ``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite has no
row locks; there every write transaction is ``BEGIN IMMEDIATE``, which serialises claims), then mark it
``running`` under this worker's lease. Results are written only while the lease is still this worker's,
and only ``pending``/``running`` sessions are ever claimed, so a finished session never runs again."""

from __future__ import annotations

import datetime as dt
import os
import socket
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Repo, Session, Translation, utcnow
from factory.run.runner_types import SessionOutcome
from factory.run.tasks import build_task
from records import attempt_id
from records.agents import AGENT_NAMES, AgentName
from sandboxes.labels import process_start_time


def owner_id(worker: int | str) -> str:
    """host:pid@start:worker — the process's start time tells a reused pid apart."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}@{process_start_time(pid)}:{worker}"


def _owner_alive(owner: str) -> bool:
    """Whether a lease owner of this host still runs (owners written before start times: by pid only)."""
    try:
        pid_text, _, start = owner.split(":")[1].partition("@")
        pid = int(pid_text)
    except (IndexError, ValueError):
        return True  # not ours to judge
    if pid == os.getpid():
        return True
    if start:
        return process_start_time(pid) == start
    return _alive(pid)


@dataclass(frozen=True)
class Claimed:
    id: str
    proxy_session_id: str
    attempt: int
    agent: AgentName
    lang: str
    repo_name: str
    repo_language: str
    clone_url: str
    setup_hint: str | None
    test_command: str | None
    base_commit: str
    task: str  # the agent's brief: the issue in the session's language


def _claimable(now: dt.datetime):  # type: ignore[no-untyped-def]
    return or_(
        and_(Session.status == "pending", Session.not_before <= now),
        and_(Session.status == "running", Session.lease_expires_at < now),
    )


def claim(
    sessions: sessionmaker[OrmSession], owner: str, *, lease_s: float, max_attempts: int
) -> Claimed | None:
    """Claim the next session, or None when nothing is claimable now."""
    while True:
        now = utcnow()
        with sessions.begin() as s:
            row = s.execute(
                select(Session)
                .where(_claimable(now))
                .order_by(Session.priority)
                .limit(1)
                .with_for_update(skip_locked=True)
            ).scalar_one_or_none()
            if row is None:
                return None
            if row.attempts >= max_attempts:
                # Its workers kept dying (lease expired every time): give up on it.
                row.status, row.lease_owner, row.lease_expires_at = "failed", None, None
                row.error = (row.error or "") + f"\nabandoned after {row.attempts} attempts (lease expired)"
                row.finished_at = now
                continue
            row.attempts += 1
            row.status = "running"
            row.lease_owner = owner
            row.lease_expires_at = now + dt.timedelta(seconds=lease_s)
            row.proxy_session_id = attempt_id(row.id, row.attempts)
            row.started_at = now
            issue = s.get_one(Issue, row.issue_id)
            repo = s.get_one(Repo, issue.repo_id)
            title, body = issue.title, issue.body
            if row.lang != "en":
                t = s.scalar(
                    select(Translation).where(
                        Translation.issue_id == issue.id,
                        Translation.lang == row.lang,
                        Translation.status == "ok",
                    )
                )
                if t is None or t.title is None or t.body is None:
                    row.status, row.error, row.finished_at = (
                        "failed",
                        f"no accepted {row.lang} translation",
                        now,
                    )
                    continue
                title, body = t.title, t.body
            if row.agent not in AGENT_NAMES:  # a row written by another version: failed, not crashed on
                row.status, row.error, row.finished_at = "failed", f"unknown agent {row.agent!r}", now
                continue
            return Claimed(
                id=row.id,
                proxy_session_id=row.proxy_session_id,
                attempt=row.attempts,
                agent=AgentName(row.agent),
                lang=row.lang,
                repo_name=repo.name,
                repo_language=repo.language,
                clone_url=repo.clone_url,
                setup_hint=repo.setup_hint,
                test_command=repo.test_command,
                base_commit=issue.base_commit or "",
                task=build_task(row.lang, repo, issue.number, title, body),
            )


def _update_held(sessions: sessionmaker[OrmSession], ids: list[str], owner: str, **values: Any) -> int:
    """Set `values` on the sessions of `ids` that `owner` still holds (running under its lease): a lease
    lost meanwhile leaves its session alone. Returns how many were updated."""
    if not ids:
        return 0
    with sessions.begin() as s:
        res = s.execute(
            update(Session)
            .where(Session.id.in_(ids), Session.lease_owner == owner, Session.status == "running")
            .values(**values)
        )
        return int(res.rowcount or 0)  # type: ignore[attr-defined]


def renew(sessions: sessionmaker[OrmSession], owner: str, ids: list[str], *, lease_s: float) -> int:
    return _update_held(sessions, ids, owner, lease_expires_at=utcnow() + dt.timedelta(seconds=lease_s))


def finish(
    sessions: sessionmaker[OrmSession],
    claimed: Claimed,
    owner: str,
    outcome: SessionOutcome,
    *,
    transcript_path: str | None,
    started_at: dt.datetime,
    finished_at: dt.datetime,
) -> bool:
    """Store the outcome (its transcript as stored at `transcript_path`); False when the lease was lost
    meanwhile (the result is then dropped)."""
    tests = outcome.tests or {}
    updated = _update_held(
        sessions,
        [claimed.id],
        owner,
        status="done",
        lease_owner=None,
        lease_expires_at=None,
        exit_status=outcome.exit_status,
        patch=outcome.patch,
        transcript_path=transcript_path,
        agent_session_id=outcome.agent_session_id,
        error=outcome.error,
        started_at=started_at,
        finished_at=finished_at,
        duration_s=(finished_at - started_at).total_seconds(),
        test_baseline=tests.get("baseline"),
        test_after=tests.get("after"),
        resolved=tests.get("resolved"),
        environment=tests.get("environment"),
    )
    return bool(updated)


def retry_later(
    sessions: sessionmaker[OrmSession],
    claimed: Claimed,
    owner: str,
    error: str,
    *,
    max_attempts: int,
    backoff_s: float,
    backoff_max_s: float = 900.0,
) -> str:
    """An infrastructure failure: back to `pending` after an exponential backoff, or `failed` once
    the attempts are spent. Returns the new status ('' when the lease was lost)."""
    delay = min(backoff_max_s, backoff_s * 2 ** (claimed.attempt - 1))
    now = utcnow()
    final = claimed.attempt >= max_attempts
    updated = _update_held(
        sessions,
        [claimed.id],
        owner,
        status="failed" if final else "pending",
        lease_owner=None,
        lease_expires_at=None,
        not_before=now + dt.timedelta(seconds=delay),
        error=f"attempt {claimed.attempt}: {error}"[:4000],
        finished_at=now if final else None,
    )
    if not updated:
        return ""
    return "failed" if final else "pending"


def release(sessions: sessionmaker[OrmSession], ids: list[str], owner: str) -> int:
    """Give leases back (a clean stop): the sessions become claimable at once, the attempt uncounted."""
    return _update_held(
        sessions,
        ids,
        owner,
        status="pending",
        lease_owner=None,
        lease_expires_at=None,
        attempts=Session.attempts - 1,
    )


def dead_local_leases(sessions: sessionmaker[OrmSession]) -> list[tuple[str, str]]:
    """(session id, lease owner) of running sessions whose owner is a process of this host that no
    longer exists (a killed runner)."""
    host = socket.gethostname()
    with sessions() as s:
        rows = s.execute(
            select(Session.id, Session.lease_owner).where(
                Session.status == "running", Session.lease_owner.like(f"{host}:%")
            )
        ).all()
    return [(sid, owner) for sid, owner in rows if owner and not _owner_alive(owner)]


def reclaim_dead_local(sessions: sessionmaker[OrmSession]) -> int:
    """Expire at once the leases held by processes of this host that no longer exist (a killed
    runner), so a restart resumes immediately instead of waiting for the leases to run out."""
    dead = dead_local_leases(sessions)
    if dead:
        with sessions.begin() as s:
            s.execute(
                update(Session)
                .where(
                    Session.id.in_([sid for sid, _ in dead]),
                    Session.status == "running",
                    Session.lease_owner.in_([owner for _, owner in dead]),
                )
                .values(lease_expires_at=utcnow() - dt.timedelta(seconds=1))
            )
    return len(dead)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def counts(sessions: sessionmaker[OrmSession]) -> dict[str, int]:
    from sqlalchemy import func

    with sessions() as s:
        return {
            k: int(v) for k, v in s.execute(select(Session.status, func.count()).group_by(Session.status))
        }
