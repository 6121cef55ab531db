"""The repository as the sandbox gets it: the tree of the base commit as the only commit of a new history.

Built on the host (while the container starts) into one tar owned by the agent user, so the sandbox needs no
exec to set it up. Agents are known to mine future commits for the fix: none of the source's history goes in.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from sandboxes.errors import SandboxInputError

GIT_ID = ["-c", "user.name=sandbox", "-c", "user.email=sandbox@localhost", "-c", "init.defaultBranch=main"]
# A throwaway repository that lives as long as one session: store objects uncompressed and skip fsync
# (about half the time of `git add` here; the tar grows by roughly the tree's compressible share).
FAST = ["-c", "core.compression=0", "-c", "core.looseCompression=0", "-c", "core.fsync=none"]
# Past ~6,700 loose objects `git commit` starts `gc --auto` in the background: it would race the tar (and
# the temporary directory's removal) with packs half written.
FAST += ["-c", "gc.auto=0", "-c", "maintenance.auto=false"]


def _git(args: list[str], *, cwd: Path | None = None, data: bytes | None = None) -> bytes:
    # The host user's own git config (signing, hooks, templates) must not shape the sandbox's history.
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    res = subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, env=env)
    if res.returncode != 0:
        raise SandboxInputError(f"git {' '.join(args[:3])}: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout


def resolve(repo: Path, rev: str) -> str:
    """The full commit id of `rev` in `repo` (a clear error when it is not a commit there)."""
    try:
        return (
            _git(["-C", str(repo), "rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}"])
            .decode()
            .strip()
        )
    except ValueError as exc:
        raise SandboxInputError(f"{rev!r} is not a commit in {repo}: {exc}") from None


def checkout_tar(repo: Path, rev: str, name: str, uid: int) -> tuple[bytes, str]:
    """A tar of `name/`: the tree of `rev`, committed once as `base <sha>` in a fresh repository, owned by `uid`.

    Returns the tar and the id of that single commit (the base the patch is taken against).
    """
    sha = resolve(repo, rev)
    with tempfile.TemporaryDirectory(prefix="dflash-repo-") as tmp:
        root = Path(tmp) / name
        root.mkdir()
        tree = _git(["-C", str(repo), "archive", "--format=tar", sha])
        subprocess.run(["tar", "-x", "-C", str(root)], input=tree, check=True, capture_output=True)
        _git([*GIT_ID, "init", "-q", "--template="], cwd=root)
        _git([*GIT_ID, *FAST, "add", "-A"], cwd=root)
        _git([*GIT_ID, *FAST, "commit", "-q", "--allow-empty", "--no-verify", "-m", f"base {sha}"], cwd=root)
        base = _git(["rev-parse", "HEAD"], cwd=root).decode().strip()
        tar = subprocess.run(
            ["tar", "-C", tmp, "-c", f"--owner={uid}", f"--group={uid}", "--numeric-owner", name],
            check=True,
            capture_output=True,
        ).stdout
    return tar, base
