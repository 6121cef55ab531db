"""SQLAlchemy 2 models of the factory's state. The schema itself is owned by the Alembic migrations
in ``factory/migrations``; tests check that the two agree."""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> dt.datetime:
    """Naive UTC: SQLite keeps no zone, so every timestamp in the database is naive UTC."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        dt.datetime: DateTime(),
    }


class Repo(Base):
    __tablename__ = "repos"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)  # owner/repo
    language: Mapped[str] = mapped_column(String(50))
    license: Mapped[str] = mapped_column(String(50))
    source: Mapped[str] = mapped_column(String(20), default="github")  # github | sample
    clone_url: Mapped[str] = mapped_column(String(500))
    default_branch: Mapped[str | None] = mapped_column(String(200))
    setup_hint: Mapped[str | None] = mapped_column(Text)
    test_command: Mapped[str | None] = mapped_column(Text)  # repos.yaml `test:`; wins over detection
    # ok | missing (404) | error
    status: Mapped[str] = mapped_column(String(20), default="new")
    status_detail: Mapped[str | None] = mapped_column(Text)
    issues_since: Mapped[str | None] = mapped_column(String(40))  # ISO updated_at high-water mark
    checked_at: Mapped[dt.datetime | None]

    issues: Mapped[list[Issue]] = relationship(back_populates="repo")


class Issue(Base):
    __tablename__ = "issues"
    __table_args__ = (UniqueConstraint("repo_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repos.id"), index=True)
    number: Mapped[int]
    title: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    author: Mapped[str | None] = mapped_column(String(200))
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    state: Mapped[str] = mapped_column(String(20), default="open")
    url: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[str] = mapped_column(String(40))  # GitHub's ISO 8601, kept verbatim
    updated_at: Mapped[str] = mapped_column(String(40))
    base_commit: Mapped[str | None] = mapped_column(String(64))
    # What fixed it, for closed issues (factory/ingest/fixlink.py): kind, url, merge_commit, files, pull_request.
    fix: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    harvested_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    repo: Mapped[Repo] = relationship(back_populates="issues")
    translations: Mapped[list[Translation]] = relationship(back_populates="issue")


class Translation(Base):
    __tablename__ = "translations"
    __table_args__ = (UniqueConstraint("issue_id", "lang"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    issue_id: Mapped[int] = mapped_column(ForeignKey("issues.id"), index=True)
    lang: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(20))  # ok | rejected
    title: Mapped[str | None] = mapped_column(Text)
    body: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)  # why it was rejected (last attempt)
    model: Mapped[str | None] = mapped_column(String(200))  # "human" for the bundled sample
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    issue: Mapped[Issue] = relationship(back_populates="translations")


class Session(Base):
    """One planned agent run: an issue, in one language, by one agent."""

    __tablename__ = "sessions"
    __table_args__ = (
        UniqueConstraint("issue_id", "lang", "agent"),
        Index("ix_sessions_claim", "status", "not_before", "priority"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # stable hash of repo#number:lang:agent
    issue_id: Mapped[int] = mapped_column(ForeignKey("issues.id"), index=True)
    lang: Mapped[str] = mapped_column(String(8))
    agent: Mapped[str] = mapped_column(String(40))
    priority: Mapped[int] = mapped_column(BigInteger)  # claim order (seeded, interleaves agents/langs)
    # pending -> running -> done | failed ; running with an expired lease is claimable again
    status: Mapped[str] = mapped_column(String(20), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    not_before: Mapped[dt.datetime] = mapped_column(default=utcnow)  # retry backoff
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[dt.datetime | None]
    proxy_session_id: Mapped[str | None] = mapped_column(
        String(80), index=True
    )  # /s/{this} of the last attempt
    planned_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    duration_s: Mapped[float | None] = mapped_column(Float)
    exit_status: Mapped[int | None] = mapped_column(Integer)
    agent_session_id: Mapped[str | None] = mapped_column(String(200))
    patch: Mapped[str | None] = mapped_column(Text)
    transcript_path: Mapped[str | None] = mapped_column(String(500))
    call_count: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    # The repository's tests before the agent and after its patch (counts, verdicts, output tail), whether the
    # patch newly made failing tests pass, and how the environment was prepared (setup, egress per host).
    test_baseline: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    test_after: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    resolved: Mapped[bool | None] = mapped_column(Boolean)
    environment: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class HttpCache(Base):
    """ETag cache of the GitHub client: a 304 answer is served from here and costs no rate limit."""

    __tablename__ = "http_cache"

    url: Mapped[str] = mapped_column(String(1000), primary_key=True)
    etag: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)
    link: Mapped[str | None] = mapped_column(Text)
    stored_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
