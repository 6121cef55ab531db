"""The finished sessions to publish, read from the factory database, and their held-out split (the rule is
`records.split`'s, which every stage shares)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Repo, Session, Translation
from factory.run.tasks import build_task
from records import attempt_id, split


def _utc(t: dt.datetime | None) -> dt.datetime | None:
    return t.replace(tzinfo=dt.UTC) if t is not None and t.tzinfo is None else t


def _outcome(sess: Session) -> str:
    if sess.status == "failed":
        return "infra_failed"
    if sess.error or (sess.exit_status not in (0, None)):
        return "agent_failed"
    return "succeeded"


def session_rows(sessions: sessionmaker[OrmSession]) -> dict[str, dict[str, Any]]:
    """Finished sessions (a `sessions` row each, totals at zero) keyed by their final attempt's proxy id."""
    out: dict[str, dict[str, Any]] = {}
    with sessions() as s:
        rows = s.execute(
            select(Session, Issue, Repo)
            .join(Issue, Session.issue_id == Issue.id)
            .join(Repo, Issue.repo_id == Repo.id)
            .where(Session.status.in_(("done", "failed")))
            .order_by(Session.id)
        ).all()
        ko = {
            t.issue_id: t
            for t in s.scalars(
                select(Translation).where(Translation.status == "ok", Translation.lang == "ko")
            )
        }
        for sess, issue, repo in rows:
            title, body = issue.title, issue.body
            if sess.lang == "ko" and issue.id in ko:
                title, body = ko[issue.id].title or title, ko[issue.id].body or body
            task = build_task(sess.lang, repo, issue.number, title, body)
            key = sess.proxy_session_id or attempt_id(sess.id, sess.attempts)
            out[key] = {
                "session_id": sess.id,
                "repo": repo.name,
                "repo_language": repo.language,
                "repo_license": repo.license,
                "issue_number": issue.number,
                "issue_url": issue.url,
                "base_commit": issue.base_commit,
                "lang": sess.lang,
                "agent": sess.agent,
                "agent_version": None,
                "target_model": None,
                "task": task,
                "outcome": _outcome(sess),
                "exit_status": sess.exit_status,
                "error": sess.error,
                "agent_session_id": sess.agent_session_id,
                "attempts": sess.attempts,
                "duration_s": sess.duration_s,
                "started_at": _utc(sess.started_at),
                "finished_at": _utc(sess.finished_at),
                "patch": sess.patch,
                "n_calls": 0,
                "n_calls_exact_ids": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "_done": sess.status == "done",
                **test_columns(sess),
                **fix_columns(issue),
            }
    return out


def test_columns(sess: Session) -> dict[str, Any]:
    """The `sessions` columns of the test outcome (issue 14): baseline/after counts and tails, resolved."""
    out: dict[str, Any] = {"resolved": sess.resolved}
    runs = {"baseline": sess.test_baseline or {}, "after": sess.test_after or {}}
    out["test_command"] = runs["baseline"].get("command") or runs["after"].get("command")
    for name, run in runs.items():
        for col in ("passed", "failed", "errors", "timed_out", "exit_code", "tail"):
            out[f"{name}_{col}"] = run.get(col)
    out["setup_status"] = ((sess.environment or {}).get("setup") or {}).get("status")
    return out


def fix_columns(issue: Issue) -> dict[str, Any]:
    """The `sessions` columns of the issue's known fix (factory/ingest/fixlink.py); null when none is known."""
    fix = issue.fix or {}
    return {
        "fix_kind": fix.get("kind"),
        "fix_url": fix.get("url"),
        "fix_pull_request": fix.get("pull_request"),
        "fix_merge_commit": fix.get("merge_commit"),
        "fix_files": fix.get("files"),
    }


def plan_splits(sessions: list[dict[str, Any]], calls: dict[str, int], held_out: float) -> split.Plan:
    """Each session's split by the one rule every stage shares (`records.split`): whole repositories held
    out, else whole sessions; a session never straddles the splits."""
    units = [split.Unit(s["session_id"], s["repo"], calls.get(s["session_id"], 0)) for s in sessions]
    return split.plan(units, held_out)
