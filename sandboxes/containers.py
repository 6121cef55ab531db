"""Removing a sandbox's containers at teardown, where one failure must not stop the rest from going."""

from __future__ import annotations

import docker
import requests
from docker.models.containers import Container


def remove_container(container: Container | None, what: str) -> list[str]:
    """Remove `container` (already gone is fine); the error, named by `what`, for the caller's teardown report."""
    if container is None:
        return []
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        return [f"{what}: {exc}"]
    return []
