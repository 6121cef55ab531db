"""Build the base and agents images; tags carry a hash of their inputs so an unchanged image is never rebuilt."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from docker.errors import ImageNotFound

from records.agents import AgentName
from sandboxes.agents.npm_install import AGENT_PACKAGES, NODE_RUNTIME
from sandboxes.config import SandboxSettings
from sandboxes.errors import SandboxSetupError
from sandboxes.images.mirror import host_mirror
from sandboxes.labels import IMAGE

DOCKERFILE = Path(__file__).with_name("Dockerfile.agents")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# OpenCode installs this next to its config on every run unless it is already there.
OPENCODE_PLUGIN = "@opencode-ai/plugin"

Log = Callable[[str], None]


def _digest(parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def ca_files(ca_dir: Path) -> list[Path]:
    """The host's extra CA certificates (update-ca-certificates only reads *.crt)."""
    if not ca_dir.is_dir():
        return []
    return sorted(p for p in ca_dir.rglob("*.crt") if p.is_file())


def agent_specs() -> list[str]:
    return [f"{pkg}@{ver}" for pkg, ver, _ in AGENT_PACKAGES.values()]


def node_spec() -> str:
    return "@".join(NODE_RUNTIME)


def opencode_plugin_spec() -> str:
    return f"{OPENCODE_PLUGIN}@{AGENT_PACKAGES[AgentName.OPENCODE][1]}"


def base_tag(settings: SandboxSettings) -> str:
    if settings.base_image:
        return settings.base_image
    mirror = settings.mirror or host_mirror(settings.suite)
    key = _digest({"suite": settings.suite, "variant": "minbase", "mirror": mirror})
    return f"{settings.image_repo}-base:{settings.suite}-{key}"


def agents_tag(settings: SandboxSettings) -> str:
    certs = [
        (p.relative_to(settings.ca_dir).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in ca_files(settings.ca_dir)
    ]
    key = _digest(
        {
            "base": base_tag(settings),
            "dockerfile": DOCKERFILE.read_text(),
            "agents": agent_specs(),
            "node": node_spec(),
            "plugin": opencode_plugin_spec(),
            "certs": certs,
        }
    )
    return f"{settings.image_repo}-agents:{key}"


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


def build_base(client: docker.DockerClient, settings: SandboxSettings, log: Log = print) -> str:
    tag = base_tag(settings)
    if _exists(client, tag):
        log(f"base image {tag} is current")
        return tag
    if settings.base_image:
        log(f"pulling {tag}")
        client.images.pull(tag)
        return tag
    if shutil.which("debootstrap") is None:
        raise SandboxSetupError(
            "no base image registry configured and debootstrap is missing (apt-get install debootstrap)"
        )
    if os.geteuid() != 0:
        raise SandboxSetupError(
            "debootstrap needs root; run `python -m sandboxes build` as root or set DFLASH_SANDBOX_BASE_IMAGE"
        )
    mirror = settings.mirror or host_mirror(settings.suite)
    log(f"building {tag} with debootstrap from {mirror}")
    with tempfile.TemporaryDirectory(prefix="dflash-rootfs-") as root:
        subprocess.run(
            ["debootstrap", "--variant=minbase", settings.suite, root, mirror],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tar = subprocess.Popen(["tar", "-C", root, "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        # The imported image has no ENV of its own: give it a PATH.
        subprocess.run(
            [
                "docker",
                "import",
                "--change",
                f"ENV {PATH_ENV}",
                "--change",
                "LABEL dflash.sandbox.image=base",
                "-",
                tag,
            ],
            stdin=tar.stdout,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        if tar.wait() != 0:
            raise SandboxSetupError("tar of the debootstrap root failed")
    return tag


def build_agents(client: docker.DockerClient, settings: SandboxSettings, log: Log = print) -> str:
    base = build_base(client, settings, log)
    tag = agents_tag(settings)
    if _exists(client, tag):
        log(f"agents image {tag} is current")
        return tag
    log(f"building {tag} (first build takes about 5 minutes)")
    with tempfile.TemporaryDirectory(prefix="dflash-agents-") as ctx:
        context = Path(ctx)
        shutil.copy(DOCKERFILE, context / "Dockerfile")
        certs = context / "ca-certificates"
        certs.mkdir()
        for path in ca_files(settings.ca_dir):
            dest = certs / path.relative_to(settings.ca_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest)
        buildargs = {
            "BASE": base,
            "AGENT_SPECS": " ".join(agent_specs()),
            "NODE_SPEC": node_spec(),
            "OPENCODE_PLUGIN_SPEC": opencode_plugin_spec(),
        }
        build_image(client, tag, "agents", buildargs, log, path=str(context))
    return tag


def build_image(
    client: docker.DockerClient,
    tag: str,
    kind: str,
    buildargs: dict[str, str],
    log: Log | None = None,
    *,
    what: str | None = None,
    **context: Any,
) -> None:
    """Build `tag`, labelled as a `kind` image, from `context` (`path=`, or `fileobj=` with `custom_context`);
    `log` gets each build step, a failure names `what` (the kind by default). The SDK talks to the classic
    builder (no BuildKit needed)."""
    stream = client.api.build(
        tag=tag, rm=True, forcerm=True, decode=True, labels={IMAGE: kind}, buildargs=buildargs, **context
    )
    for chunk in stream:
        if "error" in chunk:
            raise SandboxSetupError(f"{what or kind} image build failed: {chunk['error']}")
        line = str(chunk.get("stream", "")).rstrip()
        if log is not None and line.startswith("Step "):
            log(line)
