"""Local git repositories the sandboxes read base commits from (``git archive <base>``).

A local repository (the bundled sample) is used in place; a remote one is cloned once, bare and
blob-less, under ``DATA_DIR/repos`` and fetched again when a base commit is missing."""

from __future__ import annotations

import fcntl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from factory.run.runner_types import InfraError


def _git(*args: str, cwd: Path | None = None, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def has_commit(repo: Path, commit: str) -> bool:
    return _git("-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


class RepoCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        self.root.mkdir(parents=True, exist_ok=True)
        with lock, (self.root / f".{key}.lock").open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # other runner processes on this host
            yield

    def get(self, name: str, clone_url: str, commit: str) -> Path:
        local = Path(clone_url)
        if "://" not in clone_url and not clone_url.startswith("git@") and local.is_dir():
            if not has_commit(local, commit):
                raise InfraError(f"{clone_url} has no commit {commit}")
            return local
        key = name.replace("/", "__")
        dest = self.root / f"{key}.git"
        with self._lock(key):
            try:
                if not dest.exists():
                    r = _git("clone", "--bare", "--filter=blob:none", "--quiet", clone_url, str(dest))
                    if r.returncode != 0:
                        raise InfraError(f"git clone {clone_url}: {r.stderr.strip()[-500:]}")
                if not has_commit(dest, commit):
                    r = _git("-C", str(dest), "fetch", "--quiet", "origin", "+refs/heads/*:refs/heads/*")
                    if r.returncode != 0 or not has_commit(dest, commit):
                        raise InfraError(
                            f"{name}: commit {commit} not found after fetch {r.stderr.strip()[-300:]}"
                        )
            except subprocess.TimeoutExpired as exc:
                raise InfraError(f"git timed out for {name}") from exc
        return dest
