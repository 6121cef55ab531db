"""The GitHub client and the issue harvester against a local server speaking GitHub's REST shapes."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from factory.db import Issue, Repo, connect, session_factory
from factory.ingest.github import GitHubClient, GitHubError, NotFound
from factory.ingest.issues import DbEtagCache, harvest
from factory.ingest.registry import parse

from .fake_github import FakeGitHub, FakeRepo, issue


class Sleeps(list):
    def __call__(self, s: float) -> None:
        self.append(s)


@pytest.fixture
def gh():
    with FakeGitHub() as fake:
        yield fake


def client(gh: FakeGitHub, **kw) -> GitHubClient:
    kw.setdefault("sleep", Sleeps())
    return GitHubClient("tok123", base_url=gh.url, **kw)


def test_token_auth_and_link_pagination(gh):
    gh.add(FakeRepo("o/r", issues=[issue(n, created=f"2024-01-{n:02d}T00:00:00Z") for n in range(1, 8)]))
    c = client(gh)
    got = [i["number"] for i in c.issues("o/r", per_page=3)]
    assert got == [7, 6, 5, 4, 3, 2, 1]
    issue_reqs = [r for r in gh.requests if r["path"].endswith("/issues")]
    assert [r["query"].get("page", "1") for r in issue_reqs] == ["1", "2", "3"]
    assert all(r["headers"]["Authorization"] == "Bearer tok123" for r in gh.requests)


def test_pull_requests_are_skipped(gh):
    gh.add(FakeRepo("o/r", issues=[issue(1), issue(2, pr=True), issue(3)]))
    assert [i["number"] for i in client(gh).issues("o/r")] == [3, 1]


def test_secondary_limit_retry_after_then_success(gh):
    gh.add(FakeRepo("o/r"))
    gh.failures = [
        (403, {"Retry-After": "7"}, "You have exceeded a secondary rate limit."),
        (429, {"Retry-After": "3"}, "Too Many Requests"),
    ]
    sleeps = Sleeps()
    assert client(gh, sleep=sleeps).repo("o/r")["default_branch"] == "main"
    assert sleeps == [7.0, 3.0]


def test_secondary_limit_without_retry_after_backs_off_exponentially(gh):
    gh.add(FakeRepo("o/r"))
    gh.failures = [(403, {}, "secondary rate limit"), (403, {}, "secondary rate limit")]
    sleeps = Sleeps()
    client(gh, sleep=sleeps, secondary_backoff_s=5).repo("o/r")
    assert sleeps == [5.0, 10.0]


def test_primary_limit_exhausted_waits_for_reset(gh):
    gh.add(FakeRepo("o/r"))
    now = 1_000_000.0
    gh.failures = [
        (
            403,
            {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(now) + 30)},
            "API rate limit exceeded",
        )
    ]
    sleeps = Sleeps()
    client(gh, sleep=sleeps, clock=lambda: now).repo("o/r")
    assert sleeps == [31.0]


def test_remaining_zero_on_success_pauses_before_next_request(gh):
    gh.add(FakeRepo("o/r", issues=[issue(n) for n in range(1, 5)]))
    now = 1_000_000.0
    gh.remaining = 2  # this page and the next one exhaust it
    gh.reset_at = int(now) + 100
    sleeps = Sleeps()
    c = client(gh, sleep=sleeps, clock=lambda: now)
    assert len(list(c.issues("o/r", per_page=1))) == 4
    assert sleeps
    assert sleeps[0] == 101.0


def test_plain_403_is_an_error_not_a_retry(gh):
    gh.add(FakeRepo("o/r"))
    gh.failures = [(403, {}, "Resource not accessible by integration")]
    with pytest.raises(GitHubError) as ei:
        client(gh).repo("o/r")
    assert ei.value.status == 403


def test_404_is_not_found(gh):
    with pytest.raises(NotFound):
        client(gh).repo("nobody/nothing")


def test_etag_conditional_request_304_serves_cache(gh):
    gh.add(FakeRepo("o/r", issues=[issue(1), issue(2)]))
    c = client(gh)
    first = list(c.issues("o/r"))
    before = gh.remaining
    second = list(c.issues("o/r"))
    assert first == second
    assert gh.requests[-1]["status"] == 304
    assert "If-None-Match" in gh.requests[-1]["headers"]
    assert gh.remaining == before  # 304s do not count against the limit
    assert c.stats.not_modified == 1


def test_base_commit_is_branch_head_at_issue_creation(gh):
    gh.add(
        FakeRepo(
            "o/r",
            commits=[
                ("c3", "2024-03-01T00:00:00Z"),
                ("c2", "2024-02-01T00:00:00Z"),
                ("c1", "2024-01-01T00:00:00Z"),
            ],
        )
    )
    c = client(gh)
    assert c.commit_at("o/r", "main", "2024-02-15T10:00:00Z") == "c2"
    assert c.commit_at("o/r", "main", "2023-12-01T00:00:00Z") is None
    q = gh.requests[-1]["query"]
    assert q["sha"] == "main"
    assert q["until"] == "2023-12-01T00:00:00Z"


REG = {
    "defaults": {"issues": {"min_body_chars": 20, "max_issues": 3, "exclude_labels": ["question"]}},
    "repos": [
        {"name": "o/r", "language": "Python", "license": "MIT"},
        {"name": "ghost/gone", "language": "Go", "license": "MIT"},
    ],
}


def test_harvest_filters_records_base_commits_and_reports_404(gh, sqlite_url):
    long = "Steps to reproduce: " + "y" * 50
    gh.add(
        FakeRepo(
            "o/r",
            default_branch="dev",
            commits=[("bbb", "2024-01-10T00:00:00Z"), ("aaa", "2024-01-01T00:00:00Z")],
            issues=[
                issue(1, body=long, created="2024-01-05T00:00:00Z"),
                issue(2, body="short", created="2024-01-06T00:00:00Z"),
                issue(3, body=long, login="dependabot[bot]", user_type="Bot", created="2024-01-07T00:00:00Z"),
                issue(4, body=long, labels=("question",), created="2024-01-08T00:00:00Z"),
                issue(5, body=long, pr=True, created="2024-01-09T00:00:00Z"),
                issue(6, body=long, created="2024-01-11T00:00:00Z"),
            ],
        )
    )
    sessions = session_factory(connect(sqlite_url))
    report = harvest(sessions, parse(REG), client(gh, cache=DbEtagCache(sessions)))
    assert report.missing == ["ghost/gone"]
    assert report.repos_ok == 1
    assert report.issues_new == 2
    assert report.skipped == {"body too short": 1, "bot author": 1, "excluded label": 1}
    with sessions() as s:
        got = {i.number: i.base_commit for i in s.scalars(select(Issue))}
        assert got == {1: "aaa", 6: "bbb"}
        repos = {r.name: r for r in s.scalars(select(Repo))}
        assert repos["ghost/gone"].status == "missing"
        assert repos["o/r"].status == "ok"
        assert repos["o/r"].issues_since == "2024-01-11T00:00:00Z"

    # incremental: the next harvest asks with since= and adds only what is new, up to max_issues
    gh.repos["o/r"].issues.append(issue(7, body=long, created="2024-01-12T00:00:00Z"))
    gh.repos["o/r"].issues.append(issue(8, body=long, created="2024-01-13T00:00:00Z"))
    report = harvest(sessions, parse(REG), client(gh, cache=DbEtagCache(sessions)))
    since = [r["query"].get("since") for r in gh.requests if r["path"] == "/repos/o/r/issues"]
    assert since[-1] == "2024-01-11T00:00:00Z"
    assert report.issues_new == 1  # max_issues=3
    with sessions() as s:
        assert sorted(s.scalars(select(Issue.number))) == [1, 6, 8]


def test_server_errors_are_retried(gh):
    gh.add(FakeRepo("o/r"))
    gh.failures = [(502, {}, "Bad Gateway"), (503, {}, "unavailable")]
    sleeps = Sleeps()
    assert client(gh, sleep=sleeps).repo("o/r")["full_name"] == "o/r"
    assert sleeps == [1.0, 2.0]
