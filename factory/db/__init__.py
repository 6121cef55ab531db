"""The factory's database: SQLite (WAL) under ``data/`` by default, or any PostgreSQL URL."""

from factory.db.engine import connect, default_url, migrate, session_factory
from factory.db.models import Base, HttpCache, Issue, Repo, Session, Translation, utcnow

__all__ = [
    "Base",
    "HttpCache",
    "Issue",
    "Repo",
    "Session",
    "Translation",
    "connect",
    "default_url",
    "migrate",
    "session_factory",
    "utcnow",
]
