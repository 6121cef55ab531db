"""Engines and migrations. Every process calls :func:`connect`, which upgrades the schema to head
(serialised: an advisory lock on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
_MIGRATE_LOCK = 0x0DF1A54  # pg_advisory_lock key for schema upgrades


def default_url(data_dir: str | Path = "data") -> str:
    return f"sqlite:///{Path(data_dir).resolve() / 'factory.db'}"


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A deferred transaction that later writes fails at once with "database is locked" when
        # another writer got there first; IMMEDIATE takes the write lock up front and honours
        # busy_timeout, so concurrent workers queue instead of failing.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def connect(url: str, *, upgrade: bool = True, echo: bool = False) -> Engine:
    """An engine for ``url`` with the schema at head."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, echo=echo, connect_args={"timeout": 30, "check_same_thread": False})
        _sqlite_pragmas(engine)
    else:
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        engine = create_engine(url, echo=echo, pool_pre_ping=True, pool_size=10, max_overflow=20)
    if upgrade:
        migrate(engine)
    return engine


def _alembic_config(connection: Any) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def migrate(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATE_LOCK})
        command.upgrade(_alembic_config(conn), revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    with engine.begin() as conn:
        command.downgrade(_alembic_config(conn), revision)


def session_factory(engine: Engine) -> sessionmaker[OrmSession]:
    return sessionmaker(engine, expire_on_commit=False)
