"""Issues with a known fix (issue 14): issues harvested from the local server speaking GitHub's REST shapes
(GitHub cannot be reached from here) carry their fix; `plan --require-fix` plans only those; the exported
`sessions` rows carry the fix's pull request or commit."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from sqlalchemy import select, update
from typer.testing import CliRunner

from factory.cli import app
from factory.db import Issue, Repo, Session, connect, session_factory
from factory.ingest.github import GitHubClient
from factory.ingest.issues import harvest
from factory.ingest.registry import parse
from factory.publish.export import export
from factory.run.fake_runner import FakeSessionRunner
from factory.run.runner import RunConfig, Runner

from .fake_github import FakeGitHub, FakeRepo, issue
from .helpers import git_repo
from .test_fixlink import _merged_pull, _xref

BODY = "Steps to reproduce: " + "y" * 80


def _harvested(tmp_path: Path, sqlite_url: str) -> None:
    commit = git_repo(tmp_path / "o-r")
    with FakeGitHub() as fake:
        fake.add(
            FakeRepo(
                "o/r",
                commits=[(commit, "2024-01-01T00:00:00Z")],
                issues=[
                    issue(1, body=BODY, state="closed", created="2024-01-05T00:00:00Z"),  # fixed by PR 12
                    issue(2, body=BODY, state="closed", created="2024-01-06T00:00:00Z"),  # by a commit
                    issue(3, body=BODY, state="closed", created="2024-01-07T00:00:00Z"),  # closed by hand
                    issue(4, body=BODY, created="2024-01-08T00:00:00Z"),  # open
                ],
                timelines={
                    1: [_xref(12, "o/r", merged=True)],
                    2: [{"event": "closed", "commit_id": "c" * 40}],
                    3: [{"event": "closed", "commit_id": None}],
                },
                pulls={12: _merged_pull(12)},
                pull_files={12: ["src/x.py", "tests/test_x.py"]},
                commit_files={"c" * 40: ["src/y.py"]},
            )
        )
        sessions = session_factory(connect(sqlite_url))
        reg = parse({"repos": [{"name": "o/r", "language": "Python", "license": "MIT"}]})
        with GitHubClient("tok", base_url=fake.url, sleep=lambda _s: None) as c:
            assert harvest(sessions, reg, c).issues_new == 4
    # The fake server serves no git: the clone is the local repository holding the base commit.
    with sessions.begin() as s:
        s.execute(update(Repo).values(clone_url=str(tmp_path / "o-r")))


def test_plan_require_fix_plans_only_fixed_issues_and_export_carries_the_fix(
    tmp_path: Path, sqlite_url: str
) -> None:
    _harvested(tmp_path, sqlite_url)
    sessions = session_factory(connect(sqlite_url))
    data = tmp_path / "data"
    args = ["plan", "--db", sqlite_url, "--data-dir", str(data), "--langs", "en", "--agents", "codex"]
    r = CliRunner().invoke(app, [*args, "--require-fix"])
    assert r.exit_code == 0, r.output
    assert "4 issues (2 without a known fix left out)" in r.output
    with sessions() as s:
        planned = sorted(s.scalars(select(Issue.number).join(Session, Session.issue_id == Issue.id)))
    assert planned == [1, 2]

    Runner(sessions, FakeSessionRunner(), RunConfig(proxy_url="http://x", data_dir=data, poll_s=0.05)).run()
    stats = export(sessions, data, data / "dataset", held_out=0)
    assert stats.sessions == 2
    rows = {
        row["issue_number"]: row
        for f in sorted((data / "dataset" / "data" / "sessions").rglob("*.parquet"))
        for row in pq.read_table(f).to_pylist()
    }
    fix_cols = ("fix_kind", "fix_url", "fix_pull_request", "fix_merge_commit", "fix_files")
    assert {n: tuple(row[c] for c in fix_cols) for n, row in rows.items()} == {
        1: ("pull_request", "https://github.com/o/r/pull/12", 12, "m" * 40, ["src/x.py", "tests/test_x.py"]),
        2: ("commit", f"https://github.com/o/r/commit/{'c' * 40}", None, "c" * 40, ["src/y.py"]),
    }

    # Without the filter the other issues are planned too.
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    with sessions() as s:
        assert sorted(s.scalars(select(Issue.number).join(Session, Session.issue_id == Issue.id))) == [
            1,
            2,
            3,
            4,
        ]
