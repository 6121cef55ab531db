"""Fixtures every test package shares: the Docker engine and the agents image (built once per run)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any failure to reach the engine
        if os.environ.get("CI"):
            pytest.fail(f"no Docker engine in CI (make docker starts one): {exc}")
        pytest.skip(f"no Docker engine answers (run `make docker`): {exc}")
    return client


@pytest.fixture(scope="session")
def agents_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    from sandboxes.config import SandboxSettings
    from sandboxes.images.build import build_agents

    return build_agents(docker_client, SandboxSettings(), log=lambda _: None)
