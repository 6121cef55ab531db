"""A sandbox container's memory-cgroup counters: OOM kills and peak memory (cgroup v1 or v2)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import docker
from docker.models.containers import Container


def read(container: Container, v1: str, v2: str) -> str | None:
    """A memory-cgroup file of the container, read on the host when its cgroup is visible there (an exec
    into a container at its memory limit can itself fail), else from inside."""
    cid = container.id
    for path in (
        f"/sys/fs/cgroup/memory/docker/{cid}/{v1}",  # v1, cgroupfs driver
        f"/sys/fs/cgroup/memory/system.slice/docker-{cid}.scope/{v1}",  # v1, systemd driver
        f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/{v2}",  # v2, systemd driver
        f"/sys/fs/cgroup/docker/{cid}/{v2}",  # v2, cgroupfs driver
    ):
        with contextlib.suppress(OSError):
            return Path(path).read_text()
    script = f"cat /sys/fs/cgroup/memory/{v1} 2>/dev/null || cat /sys/fs/cgroup/{v2}"
    try:
        return str(container.exec_run(["sh", "-c", script], user="root").output.decode())
    except docker.errors.APIError:
        return None


def oom_kills(container: Container) -> int:
    """How many processes the kernel's OOM killer has killed in the container."""
    for line in (read(container, "memory.oom_control", "memory.events") or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def memory_peak_mb(container: Container) -> float | None:
    text = (read(container, "memory.max_usage_in_bytes", "memory.peak") or "").strip()
    return round(int(text) / (1 << 20), 1) if text.isdigit() else None
