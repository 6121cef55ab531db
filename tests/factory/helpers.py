"""Shared helpers of the factory tests: a tiny git repository, a database with issues in it, a proxy record."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Repo, Translation

# The proxy record fields every answered call of these tests shares: opencode streaming Chat Completions
# from the target, with the upstream's token ids.
CHAT_CALL = {
    "agent": "opencode",
    "api": "openai_chat",
    "method": "POST",
    "path": "/v1/chat/completions",
    "model": "target",
    "stream": True,
    "status_code": 200,
    "outcome": "ok",
    "token_ids_source": "upstream",
}


def git_repo(path: Path) -> str:
    """A one-commit repository; returns the commit."""
    path.mkdir(parents=True, exist_ok=True)
    env = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(path), "add", "."], check=True)
    subprocess.run(["git", "-C", str(path), *env, "commit", "-qm", "init"], check=True)
    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def seed(
    sessions: sessionmaker[OrmSession],
    repo_dir: Path,
    *,
    repos: int = 2,
    issues: int = 3,
    korean: bool = True,
) -> None:
    commit = git_repo(repo_dir)
    with sessions.begin() as s:
        for r in range(repos):
            repo = Repo(
                name=f"org{r}/proj{r}",
                language="Python",
                license="MIT",
                source="sample",
                clone_url=str(repo_dir),
                status="ok",
            )
            s.add(repo)
            s.flush()
            for n in range(1, issues + 1):
                issue = Issue(
                    repo_id=repo.id,
                    number=n,
                    title=f"Bug {n} in proj{r}",
                    body=f"Calling `f({n})` crashes.",
                    created_at="2024-01-01T00:00:00Z",
                    updated_at="2024-01-01T00:00:00Z",
                    base_commit=commit,
                )
                s.add(issue)
                s.flush()
                if korean:
                    s.add(
                        Translation(
                            issue_id=issue.id,
                            lang="ko",
                            status="ok",
                            title=f"proj{r}의 버그 {n}",
                            body=f"`f({n})`를 호출하면 충돌합니다.",
                            model="human",
                        )
                    )
