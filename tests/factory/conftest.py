"""Fixtures of the factory tests: a real SQLite file and a real PostgreSQL database per test.

`db_url` runs a test on both, for the tests whose subject is the database (the schema and its migrations,
the queue's claims and leases, the plan's writes: test_db, test_runner, test_plan); every other test of the
factory stores through the same ORM and takes `sqlite_url`.

PostgreSQL comes from ``DFLASH_TEST_PG_URL`` (a role allowed to CREATE DATABASE); .ci/run starts
Debian's cluster and sets it. Outside CI the PostgreSQL cases skip when it is unset; under CI=true
they fail instead, so CI can never go green without them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

PG_ENV = "DFLASH_TEST_PG_URL"


def _pg_admin_url() -> str | None:
    url = os.environ.get(PG_ENV)
    if not url:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{PG_ENV} is not set under CI: .ci/run must start PostgreSQL and export it")
        return None
    return url


def _driver(url: str) -> str:
    return "postgresql+psycopg://" + url.split("://", 1)[1] if url.startswith("postgresql://") else url


@pytest.fixture
def pg_url() -> Iterator[str]:
    admin = _pg_admin_url()
    if admin is None:
        pytest.skip(f"{PG_ENV} not set (CI sets it)")
    name = f"dflash_t_{uuid.uuid4().hex[:12]}"
    eng = create_engine(_driver(admin), isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    base, _, _db = admin.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with eng.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        eng.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'factory.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL (where the database is its subject)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture(scope="module")
def scripted_upstream() -> Iterator[str]:
    """The scripted model server (a GPU target cannot run here) as a process of its own."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    import httpx

    from clikit.children import free_port

    port = free_port()
    root = Path(__file__).resolve().parents[2]
    p = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.scripted_upstream", "--port", str(port)],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield url
    p.terminate()
    p.wait(10)
