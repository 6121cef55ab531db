"""Small files put into a sandbox as tar archives (the Engine API's only way in), owned by the agent user,
and read back out the same way."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import PurePosixPath
from typing import Any

from sandboxes.errors import SandboxSetupError


def _info(name: str, uid: int, mode: int, size: int = 0, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.mode, info.size, info.mtime = kind, mode, size, int(time.time())
    info.uid = info.gid = uid
    return info


def tar_files(files: dict[str, str], uid: int, *, owned_below: str | None = None, mode: int = 0o600) -> bytes:
    """A tar of `files` (path -> text). Their parent directories below `owned_below` are created owned by
    `uid` too (directories above it already exist and are left alone)."""
    buf = io.BytesIO()
    dirs: set[str] = set()
    if owned_below:
        dirs = {
            str(p) for f in files for p in PurePosixPath(f).parents if str(p).startswith(owned_below + "/")
        }
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(dirs):
            tar.addfile(_info(path, uid, 0o755, kind=tarfile.DIRTYPE))
        for path, text in files.items():
            data = text.encode()
            tar.addfile(_info(path, uid, mode, len(data)), io.BytesIO(data))
    return buf.getvalue()


def read_file(container: Any, path: str) -> bytes:
    """One file's bytes out of a container, through the archive endpoint: a plain HTTP body, unlike an
    exec's multiplexed stdout, whose tail can go missing when the process exits on a loaded engine."""
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.extractfile(tar.getmembers()[0])
        if member is None:
            raise SandboxSetupError(f"{path} in the sandbox is not a regular file")
        return member.read()
