"""Harvest: repos.yaml → `repos` rows → GitHub issues (with base commits) → `issues` rows."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import HttpCache, Issue, Repo, utcnow
from factory.ingest.fixlink import fix_for_issue
from factory.ingest.github import GitHubClient, GitHubError, NotFound, is_bot
from factory.ingest.registry import IssueFilter, Registry

log = logging.getLogger(__name__)


class DbEtagCache:
    """The GitHub client's ETag cache, kept in the database so a later harvest can get 304s."""

    def __init__(self, sessions: sessionmaker[OrmSession]):
        self._sessions = sessions

    def get(self, url: str) -> tuple[str, str, str | None] | None:
        with self._sessions() as s:
            row = s.get(HttpCache, url)
            return (row.etag, row.body, row.link) if row else None

    def put(self, url: str, etag: str, body: str, link: str | None) -> None:
        with self._sessions.begin() as s:
            row = s.get(HttpCache, url)
            if row is None:
                s.add(HttpCache(url=url, etag=etag, body=body, link=link))
            else:
                row.etag, row.body, row.link, row.stored_at = etag, body, link, utcnow()


def sync_registry(sessions: sessionmaker[OrmSession], registry: Registry) -> int:
    """Insert/refresh one `repos` row per registry entry; returns how many were new."""
    new = 0
    with sessions.begin() as s:
        existing = {r.name.lower(): r for r in s.scalars(select(Repo).where(Repo.source == "github"))}
        for e in registry.repos:
            row = existing.get(e.name.lower())
            if row is None:
                s.add(
                    Repo(
                        name=e.name,
                        language=e.language,
                        license=e.license,
                        source="github",
                        clone_url=f"https://github.com/{e.name}.git",
                        setup_hint=e.setup,
                        test_command=e.test,
                        status="new",
                    )
                )
                new += 1
            else:
                row.language, row.license, row.setup_hint = e.language, e.license, e.setup
                row.test_command = e.test
    return new


def accept(item: dict[str, Any], flt: IssueFilter) -> str | None:
    """None when the issue is a usable task, else why not."""
    if "pull_request" in item:
        return "pull request"
    if is_bot(item.get("user")):
        return "bot author"
    body = item.get("body") or ""
    if len(body) < flt.min_body_chars:
        return "body too short"
    if len(body) > flt.max_body_chars:
        return "body too long"
    names = {str(lb.get("name") if isinstance(lb, dict) else lb).lower() for lb in item.get("labels") or []}
    if any(lb.lower() not in names for lb in flt.labels):
        return "missing required label"
    if any(lb.lower() in names for lb in flt.exclude_labels):
        return "excluded label"
    return None


@dataclass
class HarvestReport:
    repos_ok: int = 0
    missing: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    issues_new: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass
class _RepoState:
    id: int
    name: str
    issues_since: str | None
    known: set[int]


@dataclass
class _Fetched:
    default_branch: str
    renamed_to: str | None
    issues: list[dict[str, Any]]
    high: str | None


def fetch_repo(client: GitHubClient, st: _RepoState, flt: IssueFilter, report: HarvestReport) -> _Fetched:
    """Network only: the repository's new acceptable issues, each with its base commit."""
    meta = client.repo(st.name)
    branch = meta.get("default_branch") or "main"
    renamed = meta.get("full_name") if meta.get("full_name", st.name).lower() != st.name.lower() else None
    budget = max(0, flt.max_issues - len(st.known))
    high, out = st.issues_since, []
    for item in client.issues(st.name, state=flt.state, since=st.issues_since, labels=flt.labels or None):
        updated = item.get("updated_at") or ""
        if not high or updated > high:
            high = updated
        if budget <= 0:
            break
        if item["number"] in st.known:
            continue
        why = accept(item, flt)
        if why is None:
            item["_base_commit"] = client.commit_at(st.name, branch, item["created_at"])
            why = None if item["_base_commit"] else "no commit before issue"
            if why is None and item.get("state") == "closed":
                item["_fix"] = _fix(client, st.name, int(item["number"]))
        if why:
            report.skipped[why] = report.skipped.get(why, 0) + 1
            continue
        out.append(item)
        budget -= 1
    return _Fetched(branch, renamed, out, high)


def _fix(client: GitHubClient, name: str, number: int) -> dict[str, Any] | None:
    """The issue's fix; a timeline that cannot be read leaves it unknown rather than failing the repository."""
    try:
        found = fix_for_issue(client, name, number)
    except GitHubError:
        return None
    return found.to_dict() if found else None


def _store(s: OrmSession, repo: Repo, f: _Fetched) -> None:
    repo.default_branch = f.default_branch
    if f.renamed_to:
        repo.status_detail = f"renamed to {f.renamed_to}"
    for item in f.issues:
        s.add(
            Issue(
                repo_id=repo.id,
                number=item["number"],
                title=item.get("title") or "",
                body=item.get("body") or "",
                author=(item.get("user") or {}).get("login"),
                labels=[lb.get("name") if isinstance(lb, dict) else lb for lb in item.get("labels") or []],
                state=item.get("state") or "open",
                url=item.get("html_url"),
                created_at=item["created_at"],
                updated_at=item.get("updated_at") or item["created_at"],
                base_commit=item["_base_commit"],
                fix=item.get("_fix"),
            )
        )
    repo.issues_since = f.high


def harvest(
    sessions: sessionmaker[OrmSession],
    registry: Registry,
    client: GitHubClient,
    *,
    limit_repos: int | None = None,
    on_repo: Callable[[str, int], None] | None = None,
) -> HarvestReport:
    """Fetch new issues of every registry repository. Repositories that 404 are marked `missing`
    and listed in the report; other errors are recorded and the harvest goes on. No database
    transaction is held across network calls."""
    sync_registry(sessions, registry)
    entries = {e.name.lower(): e for e in registry.repos}
    report = HarvestReport()
    with sessions() as s:
        repos = [
            r
            for r in s.scalars(select(Repo).where(Repo.source == "github").order_by(Repo.id))
            if r.name.lower() in entries
        ]
        states = [
            _RepoState(
                r.id,
                r.name,
                r.issues_since,
                set(s.scalars(select(Issue.number).where(Issue.repo_id == r.id))),
            )
            for r in repos[:limit_repos]
        ]
    for st in states:
        fetched: _Fetched | None = None
        status, detail = "ok", None
        try:
            fetched = fetch_repo(client, st, registry.filter_for(entries[st.name.lower()]), report)
            report.repos_ok += 1
            report.issues_new += len(fetched.issues)
        except NotFound:
            status, detail = "missing", "404 from the GitHub API"
            report.missing.append(st.name)
        except GitHubError as exc:
            status, detail = "error", str(exc)[:500]
            report.errors[st.name] = str(exc)
        with sessions.begin() as s:
            repo = s.get_one(Repo, st.id)
            repo.status, repo.status_detail, repo.checked_at = status, detail, utcnow()
            if fetched is not None:
                _store(s, repo, fetched)
        if on_repo:
            on_repo(st.name, len(fetched.issues) if fetched else 0)
    return report
