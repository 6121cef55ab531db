"""The schema: Alembic migrations (shipped in the package) agree with the models, on SQLite (WAL)
and PostgreSQL, and run down and up again."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from factory.db import Base, connect
from factory.db.engine import MIGRATIONS, downgrade, migrate


def test_migrations_match_the_models_and_roundtrip(db_url):
    engine = connect(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    tables = {"repos", "issues", "translations", "sessions", "http_cache"}
    assert tables <= set(inspect(engine).get_table_names())
    downgrade(engine, "base")
    assert not tables & set(inspect(engine).get_table_names())
    migrate(engine)
    migrate(engine)  # idempotent: every process calls it on connect
    assert tables <= set(inspect(engine).get_table_names())
    assert (MIGRATIONS / "env.py").is_file()
    assert any((MIGRATIONS / "versions").glob("0001_*.py"))


def test_sqlite_runs_in_wal_mode(sqlite_url):
    engine = connect(sqlite_url)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000
