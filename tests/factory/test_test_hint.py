"""repos.yaml's `test:` (issue 14): the loader accepts and validates it, it reaches the session through the
database and the claim, and the session's test run uses it over the hint's test steps and over detection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from factory.db import Repo, connect, session_factory
from factory.ingest import registry, sample
from factory.ingest.issues import sync_registry
from factory.ingest.registry import RegistryError, parse
from factory.run import queue
from factory.run.plan import PlanConfig, plan
from factory.run.runner_types import SessionSpec
from factory.run.sandbox_runner import session_commands
from factory.run.tasks import build_task
from sandboxes.detect import plan_for

ENTRY = {"name": "a/b", "language": "JavaScript", "license": "MIT"}


def test_the_loader_accepts_a_test_command_and_strips_it() -> None:
    reg = parse({"repos": [{**ENTRY, "setup": "npm ci", "test": "  npm run test:unit  "}]})
    assert reg.repos[0].test == "npm run test:unit"
    assert parse({"repos": [ENTRY]}).repos[0].test is None


@pytest.mark.parametrize("bad", ["", "   ", "npm ci\nnpm test", 3])
def test_the_loader_rejects_a_blank_multiline_or_non_text_test_command(bad: object) -> None:
    with pytest.raises(RegistryError, match=r"repos\[0\] \(a/b\)\.test"):
        parse({"repos": [{**ENTRY, "test": bad}]})


def test_the_bundled_registry_and_sample_carry_test_commands() -> None:
    repos = registry.load().by_name()
    assert repos["psf/requests"].test == "python -m pytest -rA -p no:cacheprovider tests"
    assert repos["expressjs/express"].test == "npm test"
    assert {s.name: s.test for s in sample.load()} == {
        "dflash-sample/csvstats": "python3 -m unittest discover -v -s tests",
        "dflash-sample/textkit": "python3 -m unittest discover -v -s tests",
        "dflash-sample/tinyqueue": "node test/test.js",
    }


def test_sync_registry_stores_and_refreshes_the_test_command(sqlite_url: str) -> None:
    sessions = session_factory(connect(sqlite_url))
    sync_registry(sessions, parse({"repos": [{**ENTRY, "test": "npm test"}]}))
    sync_registry(sessions, parse({"repos": [{**ENTRY, "test": "node t.js"}]}))  # edited repos.yaml
    with sessions() as s:
        assert s.scalars(select(Repo.test_command)).all() == ["node t.js"]


def test_a_claimed_session_carries_its_repositorys_test_command(tmp_path: Path, sqlite_url: str) -> None:
    sessions = session_factory(connect(sqlite_url))
    sample.install(sessions, tmp_path / "sample-repos")
    plan(sessions, PlanConfig(seed=0))
    expected = {s.name: s.test for s in sample.load()}
    seen = set()
    while (c := queue.claim(sessions, "me", lease_s=60, max_attempts=3)) is not None:
        assert c.test_command == expected[c.repo_name]
        seen.add(c.repo_name)
    assert seen == set(expected)


def _spec(repo: Path, commit: str, *, hint: str | None, test: str | None) -> SessionSpec:
    return SessionSpec(
        session_id="s",
        proxy_session_id="s-a1",
        attempt=1,
        agent="codex",
        lang="en",
        repo_name="a/b",
        repo_path=repo,
        base_commit=commit,
        task="t",
        proxy_url="http://p",
        setup_hint=hint,
        repo_language="JavaScript",
        test_command=test,
    )


def test_the_session_runs_the_test_command_over_the_hint_and_detection(tmp_path: Path) -> None:
    repo = tmp_path / "node-app"
    repo.mkdir()
    (repo / "package.json").write_text('{"name": "app", "scripts": {"test": "node test.js"}}\n')
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    sha = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()

    # Without hints the build files decide; the hint's trailing test steps beat them; `test:` beats both.
    none = session_commands(_spec(repo, sha, hint=None, test=None))
    assert none == (None, None)
    assert plan_for(repo, sha, setup=none[0], test=none[1]).test == "npm test"
    hinted = session_commands(_spec(repo, sha, hint="npm install && npm test -- --ci", test=None))
    assert hinted == ("npm install", "npm test -- --ci")
    chosen = session_commands(_spec(repo, sha, hint="npm install && npm test", test="node test.js"))
    assert chosen == ("npm install", "node test.js")
    got = plan_for(repo, sha, setup=chosen[0], test=chosen[1], language="JavaScript")
    assert (got.family, got.setup, got.test) == ("node", "npm install", "node test.js")


def test_the_agents_task_names_the_test_command_in_its_language() -> None:
    tested = Repo(name="a/b", language="Python", setup_hint=None, test_command="pytest -q tests")
    assert "Run the tests with: pytest -q tests\n" in build_task("en", tested, 1, "t", "b")
    assert "테스트 실행 방법: pytest -q tests\n" in build_task("ko", tested, 1, "t", "b")
    untested = Repo(name="a/b", language="Python", setup_hint=None, test_command=None)
    assert "Run the tests" not in build_task("en", untested, 1, "t", "b")
