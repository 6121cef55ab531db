"""The images: cached by the hash of their inputs, and holding what the agents need at the pinned versions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from docker.models.images import ImageCollection

from sandboxes.agents.npm_install import AGENT_PACKAGES
from sandboxes.config import SandboxSettings
from sandboxes.images import build
from sandboxes.images.build import agents_tag, build_agents, ca_files

pytestmark = pytest.mark.docker


def _run(client, image: str, script: str) -> str:  # type: ignore[no-untyped-def]
    out = client.containers.run(image, ["sh", "-c", script], remove=True, network_disabled=True, user="agent")
    return bytes(out).decode()


def test_an_unchanged_image_is_not_rebuilt(docker_client, agents_image: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings = SandboxSettings()
    logged: list[str] = []
    # Every way an image gets made is recorded instead of run: a docker build, a pull, debootstrap.
    made: list[str] = []

    def build_stream(*_a: object, **kw: object) -> Iterator[dict[str, str]]:
        made.append(f"build {kw.get('tag')}")
        return iter(())

    monkeypatch.setattr(docker_client.api, "build", build_stream)
    monkeypatch.setattr(ImageCollection, "pull", lambda self, *a, **kw: made.append(f"pull {a}"))
    monkeypatch.setattr(build.subprocess, "run", lambda cmd, *a, **kw: made.append(f"run {cmd[0]}"))
    assert build_agents(docker_client, settings, log=logged.append) == agents_image == agents_tag(settings)
    assert made == []  # nothing was built, pulled or bootstrapped: both images were found by their tag
    assert not any(line.startswith("Step ") for line in logged), logged
    assert any("is current" in line for line in logged)


def test_agents_image_holds_the_pinned_clis(docker_client, agents_image: str) -> None:  # type: ignore[no-untyped-def]
    out = _run(docker_client, agents_image, "claude --version; codex --version; opencode --version")
    for _, version, _ in AGENT_PACKAGES.values():
        assert version in out, (version, out)
    tools = _run(docker_client, agents_image, "git --version && python3 --version && node --version && id -u")
    assert "git version" in tools
    assert "Python 3" in tools
    assert tools.strip().endswith("1000")
    plugin = _run(
        docker_client, agents_image, "cat ~/.config/opencode/node_modules/@opencode-ai/plugin/package.json"
    )
    assert f'"version": "{AGENT_PACKAGES["opencode"][1]}"' in plugin, (
        "pre-installed, so no background npm install"
    )


def test_background_traffic_is_off(docker_client, agents_image: str) -> None:  # type: ignore[no-untyped-def]
    env = _run(docker_client, agents_image, "env")
    for var in (
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
        "DISABLE_TELEMETRY=1",
        "DISABLE_AUTOUPDATER=1",
        "OPENCODE_DISABLE_AUTOUPDATE=1",
        "OPENCODE_DISABLE_MODELS_FETCH=1",
        "OPENCODE_DISABLE_SHARE=1",
        "NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
    ):
        assert var in env.splitlines(), var


def test_host_ca_certificates_are_trusted_inside(docker_client, agents_image: str) -> None:  # type: ignore[no-untyped-def]
    settings = SandboxSettings()
    certs = ca_files(settings.ca_dir)
    if not certs:
        pytest.skip(f"this host has no extra CA certificates in {settings.ca_dir}")
    bundle = _run(docker_client, agents_image, "cat /etc/ssl/certs/ca-certificates.crt")
    for cert in certs:
        body = "".join(cert.read_text().split("-----")[2].split())
        assert body[:200] in "".join(bundle.split()), f"{cert.name} is not in the image's CA bundle"


def test_make_docker_finds_the_running_engine(docker_client) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    from tests.support import REPO_ROOT

    res = subprocess.run(["make", "-s", "docker"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "docker: engine answers" in res.stdout
