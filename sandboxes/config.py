"""Settings of the sandbox layer (environment prefix `DFLASH_SANDBOX_`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SandboxSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DFLASH_SANDBOX_")

    # Images. With `base_image` set (e.g. a registry's Debian image) it is pulled; otherwise the base is built
    # locally with debootstrap from the host's own Debian mirror (`mirror`, read from /etc/apt when unset).
    base_image: str | None = None
    suite: str = "bookworm"
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
    label_prefix: str = "dflash.sandbox"
