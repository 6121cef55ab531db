"""Repositories for the sandboxes: local ones in place, remote ones cloned bare once and fetched again
when a base commit is missing."""

from __future__ import annotations

import subprocess

import pytest

from factory.run.repocache import RepoCache, has_commit
from factory.run.runner_types import InfraError

from .helpers import git_repo


def commit(path, name: str) -> str:
    (path / name).write_text(name)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@e.x", "commit", "-qm", name],
        check=True,
    )
    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_local_repository_is_used_in_place(tmp_path):
    first = git_repo(tmp_path / "src")
    cache = RepoCache(tmp_path / "cache")
    assert cache.get("o/r", str(tmp_path / "src"), first) == tmp_path / "src"
    with pytest.raises(InfraError, match="no commit"):
        cache.get("o/r", str(tmp_path / "src"), "0" * 40)


def test_remote_is_cloned_once_and_fetched_for_new_commits(tmp_path):
    src = tmp_path / "src"
    first = git_repo(src)
    url = f"file://{src}"
    cache = RepoCache(tmp_path / "cache")
    path = cache.get("o/r", url, first)
    assert path == tmp_path / "cache" / "o__r.git"
    assert has_commit(path, first)
    second = commit(src, "later.txt")  # a commit made after the clone (the partial clone or a fetch gets it)
    assert cache.get("o/r", url, second) == path
    assert has_commit(path, second)
    # what the sandbox does with it
    out = subprocess.run(
        ["git", "-C", str(path), "archive", second, "later.txt"], capture_output=True, check=True
    )
    assert b"later.txt" in out.stdout
    with pytest.raises(InfraError, match="not found after fetch"):
        cache.get("o/r", url, "1" * 40)
