"""Toolchain images, one per language family, each a thin layer on the agents image.

A session pays only for its family's layer (the agents image below is shared). Toolchains are Debian's
packages, so a family builds from the same mirror as the base with no container registry. The default base
is Debian 13 (trixie): Python 3.13, Node 20, Go 1.24, rustc/cargo 1.96 (`rustc-web`), OpenJDK 21. `FAMILIES`
names the packages as Debian 12 (bookworm) has them, where Go comes from bookworm-backports (bookworm's own
1.19 is too old for current modules); `SUITE_FAMILIES` holds what trixie changes. What a repository needs on
top (its dependencies) is installed by its environment image's setup, through the egress proxy.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass, field, replace

import docker

from sandboxes.errors import SandboxInputError
from sandboxes.files import tar_files
from sandboxes.images.build import _digest, _exists, build_image

PY_CA = "/etc/ssl/certs/ca-certificates.crt"
_BUILDING = threading.Lock()  # sessions in threads share one build of each image


@dataclass(frozen=True)
class Family:
    name: str
    packages: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    script: str = ""  # run as root after the packages (a shell line)
    backports: tuple[str, ...] = ()  # packages taken from <suite>-backports


FAMILIES: dict[str, Family] = {
    "python": Family(
        "python",
        ("python3-venv", "python3-pip", "python3-pytest", "python3-dev", "gcc", "libc6-dev"),
        # A venv of the agent's own, so `pip install` works (Debian's Python refuses it system-wide, PEP 668);
        # it sees Debian's pytest so tests run even before anything is installed.
        env={
            "VIRTUAL_ENV": "/opt/venv",
            "PATH": "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PIP_CERT": PY_CA,
            "REQUESTS_CA_BUNDLE": PY_CA,
            "SSL_CERT_FILE": PY_CA,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        script="python3 -m venv --system-site-packages /opt/venv && chown -R agent:agent /opt/venv",
    ),
    "node": Family(
        "node",
        (),
        script="npm install -g --no-audit --no-fund pnpm@9 yarn@1 && npm cache clean --force",
    ),
    "go": Family(
        "go",
        ("gcc", "libc6-dev"),
        backports=("golang-go",),
        env={
            "PATH": "/home/agent/go/bin:/usr/lib/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-modcacherw",
        },
    ),
    "rust": Family(
        "rust",
        ("rustc-web", "cargo-web", "gcc", "libc6-dev", "pkg-config"),
        env={"CARGO_HOME": "/home/agent/.cargo"},
    ),
    "java": Family(
        "java",
        ("openjdk-17-jdk-headless", "maven", "gradle"),
        env={"JAVA_HOME": "/usr/lib/jvm/java-17-openjdk-amd64"},
    ),
    "cpp": Family("cpp", ("build-essential", "cmake", "pkg-config")),
}


# Checked with `apt-cache policy` in a trixie base image: golang-go 1.24, openjdk-21-jdk-headless 21.0, and
# rustc-web/cargo-web 1.96, python3 3.13, nodejs 20.19, cmake 3.31, maven 3.9.9 under the bookworm names.
SUITE_FAMILIES: dict[str, dict[str, Family]] = {
    "trixie": {
        "go": replace(FAMILIES["go"], packages=("golang-go", "gcc", "libc6-dev"), backports=()),
        "java": replace(
            FAMILIES["java"],
            packages=("openjdk-21-jdk-headless", "maven", "gradle"),
            env={"JAVA_HOME": "/usr/lib/jvm/java-21-openjdk-amd64"},
        ),
    },
}


def family_for(name: str, suite: str) -> Family:
    """The family's toolchain on the Debian `suite` of the base image (bookworm's where the suite adds none)."""
    if name not in FAMILIES:
        raise SandboxInputError(f"unknown language family {name!r}; known: {', '.join(FAMILIES)}")
    return SUITE_FAMILIES.get(suite, {}).get(name, FAMILIES[name])


def dockerfile(family: Family) -> str:
    lines = ["ARG BASE", "FROM ${BASE}", "USER root"]
    install = ["apt-get update -q"]
    if family.backports:
        # The suite's mirror as the base's own sources name it, plus its backports.
        install.append(
            "m=$(sed -n 's/^deb \\([^ ]*\\) \\([^ ]*\\) .*/\\1 \\2/p' /etc/apt/sources.list | head -1)"
            ' && echo "deb ${m%% *} ${m##* }-backports main" > /etc/apt/sources.list.d/backports.list'
            " && apt-get update -q"
            f" && apt-get install -y -q --no-install-recommends -t ${{m##* }}-backports {' '.join(family.backports)}"
        )
    if family.packages:
        install.append(f"apt-get install -y -q --no-install-recommends {' '.join(family.packages)}")
    install.append("rm -rf /var/lib/apt/lists/*")
    lines.append("RUN " + " \\\n && ".join(install))
    if family.script:
        lines.append(f"RUN {family.script}")
    if family.env:
        lines.append("ENV " + " ".join(f'{k}="{v}"' for k, v in family.env.items()))
    lines.append(f'LABEL dflash.sandbox.family="{family.name}"')
    return "\n".join(lines) + "\n"


def family_tag(agents: str, family: Family) -> str:
    return f"dflash-sandbox-{family.name}:{_digest({'agents': agents, 'dockerfile': dockerfile(family)})}"


def build_family(client: docker.DockerClient, agents: str, name: str, suite: str) -> str:
    """The family's image on `agents` (built once: the tag carries a hash of both)."""
    family = family_for(name, suite)
    tag = family_tag(agents, family)
    with _BUILDING:
        if not _exists(client, tag):
            context = io.BytesIO(tar_files({"Dockerfile": dockerfile(family)}, 0, mode=0o644))
            what = f"{family.name} toolchain"
            build_image(
                client, tag, "family", {"BASE": agents}, what=what, fileobj=context, custom_context=True
            )
    return tag
