"""Fixtures for the sandbox tests: the engine, the agents image, a scripted upstream, the proxy, a repo."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import background, free_port

FUTURE_FILE = "FUTURE_FIX.txt"


@pytest.fixture(scope="session")
def upstream_url() -> Iterator[str]:
    """The scripted target (a GPU vLLM cannot run here): one shell tool call creating AGENT_PROOF.txt, then text."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with background(["-m", "tests.fakes.scripted_upstream", "--port", str(port)], f"{url}/health"):
        yield url


@pytest.fixture(scope="session")
def proxy_server(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The real logging proxy in front of the scripted upstream: (URL as the host sees it, data dir)."""
    port = free_port()
    data = tmp_path_factory.mktemp("proxy-data")
    url = f"http://127.0.0.1:{port}"
    args = [
        "-m",
        "proxy",
        "serve",
        "--upstream",
        upstream_url,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(data),
    ]
    with background(args, f"{url}/healthz"):
        yield url, data


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def base_commit(path: Path) -> str:
    """Make the files at `path` a new repository's one commit, `base`; its sha."""
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return git(path, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose base commit is followed by a commit holding the 'fix' (the future)."""
    path = tmp_path / "repo"
    (path / "src").mkdir(parents=True)
    (path / "README.md").write_text("base\n")
    (path / "src" / "app.py").write_text("print('hi')\n")
    base = base_commit(path)
    (path / FUTURE_FILE).write_text("the answer\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "future fix")
    return path, base


@pytest.fixture
def run_id() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def leftovers(client, run_id: str) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """Containers, networks and firewall rules that still carry `run_id`."""
    from sandboxes import labels
    from sandboxes.network import tagged_rules

    flt = {"label": f"{labels.RUN}={run_id}"}
    networks = [n.name for n in client.networks.list(filters=flt)]
    existing = {n.name for n in client.networks.list(filters={"label": labels.ROOT})}
    return {
        "containers": [c["Names"][0].lstrip("/") for c in client.api.containers(all=True, filters=flt)],
        "networks": networks,
        # This run's rules, and any rule whose network is gone (a teardown that forgot its rules).
        "rules": [spec for _, name, spec in tagged_rules() if name in networks or name not in existing],
    }
