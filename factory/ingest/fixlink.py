"""What fixed an issue: the pull request or commit that closed it, its merge commit and the files it changed.

Read from the issue's timeline (`GET /repos/{o}/{r}/issues/{n}/timeline`): a `cross-referenced` event whose
source is a merged pull request, else the `closed` event's `commit_id` (closed by a commit that says
"fixes #n"). A merged pull request gives its `merge_commit_sha` and `pulls/{n}/files`; a commit its own
`files`. Also the repository facts `repos check --online` reports (archived, fork, issues disabled).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from factory.ingest.github import GitHubClient


@dataclass
class FixLink:
    kind: str  # "pull_request" or "commit"
    url: str
    merge_commit: str | None
    files: list[str] = field(default_factory=list)
    pull_request: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _merged_pull(event: dict[str, Any]) -> dict[str, Any] | None:
    issue = (event.get("source") or {}).get("issue") or {}
    pull = issue.get("pull_request")
    if event.get("event") == "cross-referenced" and pull and pull.get("merged_at"):
        return issue
    return None


def fix_for_issue(gh: GitHubClient, name: str, number: int) -> FixLink | None:
    """The fix of issue `number` in `name`, or None when its timeline names none."""
    events = list(gh.paginate(f"/repos/{name}/issues/{number}/timeline", {"per_page": 100}))
    pulls = [p for p in map(_merged_pull, events) if p is not None]
    # Same-repository pull requests only: a fork's PR that mentions the issue did not fix this repository.
    pulls = [p for p in pulls if f"/repos/{name}/".lower() in str(p.get("repository_url", "") + "/").lower()]
    if pulls:
        pr = pulls[-1]
        detail: dict[str, Any] = gh.get(f"/repos/{name}/pulls/{pr['number']}").data
        files = [
            f["filename"] for f in gh.paginate(f"/repos/{name}/pulls/{pr['number']}/files", {"per_page": 100})
        ]
        return FixLink(
            "pull_request",
            str(detail.get("html_url") or pr.get("html_url") or ""),
            detail.get("merge_commit_sha"),
            files,
            int(pr["number"]),
        )
    closed = [e for e in events if e.get("event") == "closed" and e.get("commit_id")]
    if closed:
        sha = str(closed[-1]["commit_id"])
        commit: dict[str, Any] = gh.get(f"/repos/{name}/commits/{sha}").data
        files = [f["filename"] for f in commit.get("files") or []]
        return FixLink("commit", str(commit.get("html_url") or ""), sha, files)
    return None


def repo_warnings(data: dict[str, Any]) -> list[str]:
    """Why a registry entry may yield nothing: archived, a fork, or issues turned off."""
    notes = []
    if data.get("archived"):
        notes.append("archived")
    if data.get("fork"):
        parent = (data.get("parent") or {}).get("full_name")
        notes.append(f"fork of {parent}" if parent else "fork")
    if data.get("has_issues") is False:
        notes.append("issues disabled")
    return notes
