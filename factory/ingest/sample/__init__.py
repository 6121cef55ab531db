"""The bundled offline sample: small real-looking repositories with written issues, each with a
hand-written Korean version. The git repositories are generated at run time, deterministically (fixed
authors and dates), from the YAML files beside this module."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Repo, Translation

HERE = Path(__file__).resolve().parent
AUTHOR = ("Sample Maintainer", "maintainer@sample.invalid")


@dataclass
class SampleRepo:
    name: str
    language: str
    license: str
    setup: str | None
    test: str | None  # the test command of the baseline/after runs (like repos.yaml's `test:`)
    commits: list[dict[str, Any]]
    issues: list[dict[str, Any]]


def load() -> list[SampleRepo]:
    out = []
    for f in sorted(HERE.glob("*.yaml")):
        d = yaml.safe_load(f.read_text(encoding="utf-8"))
        out.append(
            SampleRepo(
                d["name"],
                d["language"],
                d["license"],
                d.get("setup"),
                d.get("test"),
                d["commits"],
                d["issues"],
            )
        )
    return out


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=True,
    )
    return r.stdout.strip()


def materialize(sample: SampleRepo, root: Path) -> Path:
    """Create (or reuse) the sample's git repository under `root`; same input, same commit ids."""
    path = root / sample.name.replace("/", "__")
    if (path / ".git").is_dir():
        try:
            if int(_git(path, "rev-list", "--count", "HEAD")) == len(sample.commits):
                return path
        except subprocess.CalledProcessError:
            pass
    if path.exists():
        subprocess.run(["rm", "-rf", str(path)], check=True)
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    for c in sample.commits:
        for rel, text in c["files"].items():
            f = path / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(text, encoding="utf-8")
        _git(path, "add", "-A")
        env = {
            "GIT_AUTHOR_NAME": AUTHOR[0],
            "GIT_AUTHOR_EMAIL": AUTHOR[1],
            "GIT_COMMITTER_NAME": AUTHOR[0],
            "GIT_COMMITTER_EMAIL": AUTHOR[1],
            "GIT_AUTHOR_DATE": c["date"],
            "GIT_COMMITTER_DATE": c["date"],
        }
        _git(path, "commit", "-q", "-m", c["message"], env=env)
    return path


def base_commit(repo: Path, created_at: str) -> str:
    """The default branch's head at the issue's creation time (as the GitHub harvester computes it)."""
    return _git(repo, "rev-list", "-1", f"--before={created_at}", "main")


def install(sessions: sessionmaker[OrmSession], root: Path) -> dict[str, int]:
    """Materialise the sample repositories and load their issues and Korean versions into the DB."""
    counts = {"repos": 0, "issues": 0, "translations": 0}
    for sample in load():
        path = materialize(sample, root)
        with sessions.begin() as s:
            repo = s.scalar(select(Repo).where(Repo.name == sample.name))
            if repo is None:
                repo = Repo(
                    name=sample.name,
                    language=sample.language,
                    license=sample.license,
                    source="sample",
                    clone_url=str(path),
                    setup_hint=sample.setup,
                    test_command=sample.test,
                    status="ok",
                    default_branch="main",
                )
                s.add(repo)
                s.flush()
                counts["repos"] += 1
            repo.clone_url = str(path)
            repo.setup_hint, repo.test_command = sample.setup, sample.test
            known = set(s.scalars(select(Issue.number).where(Issue.repo_id == repo.id)))
            for it in sample.issues:
                if it["number"] in known:
                    continue
                issue = Issue(
                    repo_id=repo.id,
                    number=it["number"],
                    title=it["title"],
                    body=it["body"],
                    author=it.get("author"),
                    labels=it.get("labels", []),
                    state="open",
                    url=None,
                    created_at=it["created_at"],
                    updated_at=it["created_at"],
                    base_commit=base_commit(path, it["created_at"]),
                )
                s.add(issue)
                s.flush()
                counts["issues"] += 1
                s.add(
                    Translation(
                        issue_id=issue.id,
                        lang="ko",
                        status="ok",
                        title=it["title_ko"],
                        body=it["body_ko"],
                        model="human",
                    )
                )
                counts["translations"] += 1
    return counts
