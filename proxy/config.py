"""Proxy settings: CLI flags override environment variables (prefix DFLASH_PROXY_)."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_proxy_id() -> str:
    # Unique per process so several proxies can share one data dir without clashing spool names.
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class ProxySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DFLASH_PROXY_", extra="ignore")

    upstream: str = Field(description="Base URL of the target endpoint, e.g. http://127.0.0.1:8000")
    host: str = "127.0.0.1"
    port: int = 8100
    data_dir: Path = Path("data")
    upstream_key: SecretStr | None = None
    client_keys: list[str] = Field(default_factory=list)
    max_body_bytes: int = 32 * 1024 * 1024
    connect_timeout_s: float = 10.0
    # Agents' long generations stream for minutes: this bounds the wait for the next byte, not the call.
    read_timeout_s: float = 600.0
    upstream_api: Literal["native", "chat"] = "native"
    # aiohttp parses upstream streams in C; httpx's own transport (httpcore) is the fallback.
    upstream_transport: Literal["aiohttp", "httpx"] = "aiohttp"
    return_token_ids: bool = True
    tokenize_native: bool = False
    proxy_id: str = Field(default_factory=default_proxy_id)
    # Spool segments roll into one Parquet part each; these bound a part's size and staleness.
    segment_max_records: int = 2000
    segment_max_bytes: int = 64 * 1024 * 1024
    segment_max_age_s: float = 60.0

    @field_validator("upstream")
    @classmethod
    def _strip_slash(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("upstream must be an http:// or https:// URL")
        return v.rstrip("/")

    @property
    def calls_dir(self) -> Path:
        return self.data_dir / "calls"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"
