"""Settings of the sandbox layer (environment prefix `DFLASH_SANDBOX_`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SandboxSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DFLASH_SANDBOX_")

    # Images. With `base_image` set (e.g. a registry's Debian image) it is pulled; otherwise the base is built
    # locally with debootstrap from the host's own Debian mirror (`mirror`, read from /etc/apt when unset).
    base_image: str | None = None
    # Debian 13: Python 3.13, Node 20, Go 1.24, Rust 1.96, OpenJDK 21 in the toolchain families (bookworm's
    # are older; `bookworm` still builds, with Go from backports and OpenJDK 17).
    suite: str = "trixie"
    mirror: str | None = None
    image_repo: str = "dflash-sandbox"
    # Extra CA certificates copied into the agents image: users behind TLS-inspecting proxies need them.
    ca_dir: Path = Path("/usr/local/share/ca-certificates")

    # Per-sandbox limits. The agents mostly wait on the model, so one CPU is plenty.
    cpus: Annotated[float, Field(gt=0)] = 1.0
    memory: str = "2g"
    pids: Annotated[int, Field(gt=0)] = 512
    wall_time_s: Annotated[float, Field(gt=0)] = 900.0

    # Each sandbox gets its own small internal network. Docker's default pools hold only ~30 networks, so
    # sandboxes take /28s from this pool instead (None: let Docker choose, and live with that cap).
    subnet_pool: str | None = "172.31.0.0/16"
    subnet_prefix: Annotated[int, Field(ge=16, le=29)] = 28

    user: str = "agent"
    workdir: str = "/work/repo"

    # Realism (issue 14): controlled egress, toolchain families, environment images, test outcome.
    egress: Literal["none", "registries"] = Field(
        default="none",
        description="Network policy of a sandbox: `none` reaches only the proxy; `registries` also reaches the "
        "package registries (PyPI, npm, crates, Go proxy, Maven Central, Debian) through a squid forward proxy",
    )
    egress_extra_hosts: list[str] = Field(
        default_factory=list,
        description="Further hosts (`name` or `name:port`) the egress proxy allows (a site's own mirror, e.g. an Artifactory); unlike "
        "the registries these may resolve to private addresses",
    )
    setup_time_limit_s: float = Field(
        default=1200.0, gt=0, description="Time limit of one environment image's setup command"
    )
    setup_retries: int = Field(
        default=2,
        ge=1,
        description="Setup attempts per repository, commit and lockfile before its failure is final",
    )
    test_time_limit_s: float = Field(
        default=600.0, gt=0, description="Time limit of one test run (baseline or after the patch)"
    )
    env_state_dir: Path = Field(
        default=Path.home() / ".cache" / "dflash-sandbox",
        description="Where environment image setup failures and their attempt counts are recorded",
    )
    env_min_free_gb: float = Field(
        default=5.0,
        ge=0,
        description="Free disk under Docker's root below which no environment image is built",
    )
    env_max_age_days: float = Field(
        default=14.0, gt=0, description="Environment images older than this are removed by their GC"
    )
    env_budget_gb: float = Field(
        default=100.0,
        gt=0,
        description="Disk the environment images may hold together; the GC removes the oldest beyond it",
    )
    env_images: bool = Field(
        default=True,
        description="Factory sessions run in their repository's environment image (toolchain, dependencies, "
        "checkout) with the test command before and after the agent; off: the plain agents image",
    )
