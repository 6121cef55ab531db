"""Issue → fix: the merged pull request or the closing commit read from an issue's timeline, against the local
server speaking GitHub's REST shapes (GitHub's API cannot be reached from here); and the repository facts
`repos check --online` reports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from factory.ingest.fixlink import fix_for_issue, repo_warnings
from factory.ingest.github import GitHubClient

from .fake_github import FakeGitHub, FakeRepo

API = "https://api.github.com"


def _xref(number: int, repo: str, merged: bool) -> dict[str, object]:
    return {
        "event": "cross-referenced",
        "source": {
            "type": "issue",
            "issue": {
                "number": number,
                "html_url": f"https://github.com/{repo}/pull/{number}",
                "repository_url": f"{API}/repos/{repo}",
                "pull_request": {"merged_at": "2024-02-01T00:00:00Z" if merged else None},
            },
        },
    }


def _merged_pull(number: int) -> dict[str, object]:
    """pulls/{number} of o/r, merged as commit m…m."""
    return {
        "number": number,
        "html_url": f"https://github.com/o/r/pull/{number}",
        "merge_commit_sha": "m" * 40,
    }


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        fake.add(
            FakeRepo(
                "o/r",
                timelines={
                    # Mentioned by an unmerged PR and by a fork's merged PR; fixed by PR 12.
                    1: [
                        {"event": "labeled"},
                        _xref(11, "o/r", merged=False),
                        _xref(99, "someone/r-fork", merged=True),
                        _xref(12, "o/r", merged=True),
                        {"event": "closed", "commit_id": "m" * 40},
                    ],
                    # Closed by a commit pushed straight to the branch ("fixes #2").
                    2: [
                        {"event": "referenced", "commit_id": "c" * 40},
                        {"event": "closed", "commit_id": "c" * 40},
                    ],
                    # Closed by hand: no known fix.
                    3: [{"event": "closed", "commit_id": None}],
                },
                pulls={12: _merged_pull(12)},
                pull_files={12: [f"src/file{i}.py" for i in range(150)]},
                commit_files={"c" * 40: ["lib/a.go", "lib/a_test.go"]},
            )
        )
        yield fake


def test_fix_from_a_merged_pull_request(gh: FakeGitHub) -> None:
    with GitHubClient("tok", base_url=gh.url, sleep=lambda _s: None) as c:
        fix = fix_for_issue(c, "o/r", 1)
    assert fix is not None
    assert (fix.kind, fix.pull_request, fix.merge_commit) == ("pull_request", 12, "m" * 40)
    assert fix.url == "https://github.com/o/r/pull/12"
    assert fix.files == [f"src/file{i}.py" for i in range(150)]  # two pages of files
    assert any(
        r["path"] == "/repos/o/r/pulls/12/files" and r["query"].get("page") == "2" for r in gh.requests
    )


def test_fix_from_a_closing_commit_and_none_when_closed_by_hand(gh: FakeGitHub) -> None:
    with GitHubClient("tok", base_url=gh.url, sleep=lambda _s: None) as c:
        fix = fix_for_issue(c, "o/r", 2)
        assert fix is not None
        assert fix.to_dict() == {
            "kind": "commit",
            "url": f"https://github.com/o/r/commit/{'c' * 40}",
            "merge_commit": "c" * 40,
            "files": ["lib/a.go", "lib/a_test.go"],
            "pull_request": None,
        }
        assert fix_for_issue(c, "o/r", 3) is None


def test_repo_warnings() -> None:
    assert repo_warnings({"archived": False, "fork": False, "has_issues": True}) == []
    assert repo_warnings(
        {"archived": True, "fork": True, "parent": {"full_name": "up/r"}, "has_issues": False}
    ) == [
        "archived",
        "fork of up/r",
        "issues disabled",
    ]
    assert repo_warnings({"fork": True}) == ["fork"]


def test_repos_check_online_reports_archived_forks_and_no_issues(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from factory.cli import app

    f = tmp_path / "repos.yaml"
    f.write_text(
        "repos:\n"
        "  - {name: o/ok, language: Go, license: MIT}\n"
        "  - {name: o/old, language: Go, license: MIT}\n"
        "  - {name: o/copy, language: Go, license: MIT}\n"
    )
    with FakeGitHub() as fake:
        fake.add(FakeRepo("o/ok", facts={"archived": False, "fork": False, "has_issues": True}))
        fake.add(FakeRepo("o/old", facts={"archived": True, "has_issues": True}))
        fake.add(
            FakeRepo("o/copy", facts={"fork": True, "parent": {"full_name": "up/copy"}, "has_issues": False})
        )
        r = CliRunner().invoke(app, ["repos", "check", "--path", str(f), "--online", "--api-url", fake.url])
    assert r.exit_code == 0, r.output
    assert "archived o/old" in r.output
    assert "fork of up/copy, issues disabled o/copy" in r.output
    assert "o/ok" not in r.output
    assert "0 of 3 not found; 2 archived, forks or without issues" in r.output


def test_harvest_stores_the_fix_of_closed_issues(sqlite_url) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from factory.db import Issue, connect, session_factory
    from factory.ingest.issues import harvest
    from factory.ingest.registry import parse

    from .fake_github import issue

    body = "Steps to reproduce: " + "y" * 80
    with FakeGitHub() as fake:
        fake.add(
            FakeRepo(
                "o/r",
                commits=[("aaa", "2024-01-01T00:00:00Z")],
                issues=[
                    issue(1, body=body, state="closed", created="2024-01-05T00:00:00Z"),
                    issue(2, body=body, state="closed", created="2024-01-06T00:00:00Z"),
                    issue(3, body=body, created="2024-01-07T00:00:00Z"),
                ],
                timelines={1: [_xref(12, "o/r", merged=True)], 2: [{"event": "closed", "commit_id": None}]},
                pulls={12: _merged_pull(12)},
                pull_files={12: ["src/x.py"]},
            )
        )
        sessions = session_factory(connect(sqlite_url))
        reg = parse({"repos": [{"name": "o/r", "language": "Python", "license": "MIT"}]})
        with GitHubClient("tok", base_url=fake.url, sleep=lambda _s: None) as c:
            report = harvest(sessions, reg, c)
        # An open issue's timeline is not asked for.
        assert not [r for r in fake.requests if r["path"] == "/repos/o/r/issues/3/timeline"]
    assert report.issues_new == 3
    with sessions() as s:
        fixes = {i.number: i.fix for i in s.scalars(select(Issue))}
    assert fixes[1] == {
        "kind": "pull_request",
        "url": "https://github.com/o/r/pull/12",
        "merge_commit": "m" * 40,
        "files": ["src/x.py"],
        "pull_request": 12,
    }
    assert fixes[2] is None
    assert fixes[3] is None
