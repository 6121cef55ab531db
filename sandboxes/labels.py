"""Labels on every container and network a sandbox creates, and who owns them (for `gc`): the owner is a
process named by host, pid and start time, so a reused pid is never taken for it. A factory run's ledger
names its owner the same way (`factory/run/ledger.py`), so a run and its sandboxes are judged alike."""

from __future__ import annotations

import os
import socket
from pathlib import Path

# Every label key the sandboxes put on Docker objects, here and nowhere else.
ROOT = "dflash.sandbox"
RUN = f"{ROOT}.run"
SESSION = f"{ROOT}.session"
OWNER = f"{ROOT}.owner"
IMAGE = f"{ROOT}.image"  # what an image the sandboxes built is: agents, family, egress, env
EGRESS = f"{ROOT}.egress"  # the egress proxy's container
ENV = "dflash.env"  # a repository's environment image
ENV_BASE = f"{ENV}.base"  # the id of the single commit inside (what patches are taken against)
ENV_REPO = f"{ENV}.repo"
ENV_COMMIT = f"{ENV}.commit"
ENV_FAMILY_IMAGE = f"{ENV}.family_image"
ENV_CREATED = f"{ENV}.created"


def process_start_time(pid: int) -> str | None:
    try:
        # Field 22 of /proc/PID/stat: start time in clock ticks since boot; tells a reused pid apart.
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner_token(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid)}"


def owner_alive(token: str) -> bool:
    host, _, rest = token.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True  # another machine's run: not ours to judge
    try:
        return process_start_time(int(pid)) == start
    except ValueError:
        return False


def labels(run_id: str, session_id: str) -> dict[str, str]:
    return {ROOT: "1", RUN: run_id, SESSION: session_id, OWNER: owner_token()}
