"""Proxy settings: one pydantic model; `python -m proxy serve` generates its options from it (clikit), so each
option has its DFLASH_PROXY_<NAME> environment variable and each default lives here only."""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from wire import UpstreamApi

MiB = 1024 * 1024


def default_proxy_id() -> str:
    # Unique per process so several proxies can share one data dir without clashing spool names.
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class ProxySettings(BaseSettings):
    # env_prefix_target="all": the alias DFLASH_PROXY_CLIENT_KEYS is read with the prefix too, never bare.
    model_config = SettingsConfigDict(
        env_prefix="DFLASH_PROXY_", env_prefix_target="all", extra="ignore", populate_by_name=True
    )

    upstream: str = Field(description="Base URL of the target endpoint, e.g. http://127.0.0.1:8000.")
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8100, ge=0, le=65535, description="Port to listen on.")
    data_dir: Path = Field(
        Path("data"), description="Where calls are recorded: DATA_DIR/spool, DATA_DIR/calls."
    )
    upstream_key: SecretStr | None = Field(
        None, description="Key the proxy sends upstream (never the client's)."
    )
    client_key: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias=AliasChoices("client_key", "client_keys"),
        description="A key clients must present (repeatable; in the environment a JSON list or keys separated "
        "by spaces; DFLASH_PROXY_CLIENT_KEYS is read too). None given: no key needed.",
    )
    upstream_api: UpstreamApi = Field(
        "native", description="What the upstream speaks: every API natively, or Chat Completions only."
    )
    upstream_transport: Literal["aiohttp", "httpx"] = Field(
        "aiohttp", description="HTTP client to the upstream: aiohttp (C parser) or httpx's own (httpcore)."
    )
    return_token_ids: bool = Field(True, description="Ask a vLLM upstream for token ids on Chat Completions.")
    tokenize_native: bool = Field(
        False, description="Fill prompt ids of native Messages/Responses calls from /tokenize when they roll."
    )
    max_tokens_cap: int | None = Field(
        None, ge=1, description="Lower each call's completion limit to this (and set it where none was sent)."
    )
    served_context: int | None = Field(
        None,
        ge=1,
        description="The upstream's context (vLLM's max_model_len): a larger completion limit is lowered to "
        "it. Unset: read from the upstream's /v1/models when the proxy starts (see --discover-context).",
    )
    discover_context: bool = Field(
        True, description="Read the served context from the upstream's /v1/models at start when not given."
    )
    proxy_id: str = Field(default_factory=default_proxy_id, description="This process's name in records.")
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = Field(
        "warning", description="Log level."
    )
    # Limits on what a client can make the proxy do.
    max_body_bytes: int = Field(32 * MiB, gt=0, description="Largest request body, sent and decoded.")
    max_header_bytes: int = Field(64 * 1024, ge=4096, description="Largest request head (line + headers).")
    header_timeout_s: float = Field(15.0, gt=0, description="Time a client has to send a request's head.")
    body_timeout_s: float = Field(120.0, gt=0, description="Time a client has to send a request's body.")
    idle_timeout_s: float = Field(
        65.0, gt=0, description="An idle keep-alive connection is closed after this."
    )
    max_connections: int = Field(4096, gt=0, description="Connections and requests at once; beyond, 503.")
    # The upstream.
    connect_timeout_s: float = Field(10.0, gt=0, description="Time to connect to the upstream.")
    read_timeout_s: float = Field(
        600.0, gt=0, description="Longest wait for the upstream's next byte (not for the whole call)."
    )
    shutdown_timeout_s: float = Field(
        20.0,
        ge=0,
        description="On SIGTERM, in-flight calls get this long; then streams end with an error event.",
    )
    # Recording.
    stream_memory_bytes: int = Field(
        64 * 1024, gt=0, description="Response bytes a call keeps in memory; the rest spills to the spool."
    )
    rejected_body_bytes: int = Field(
        64 * 1024, ge=0, description="How much of a rejected request's body its record keeps."
    )
    min_free_bytes: int = Field(
        128 * MiB, ge=0, description="Below this much free space in DATA_DIR calls are refused (503)."
    )
    segment_max_records: int = Field(
        2000, gt=0, description="Calls per spool segment (one Parquet part each)."
    )
    segment_max_bytes: int = Field(64 * MiB, gt=0, description="Bytes per spool segment.")
    segment_max_age_s: float = Field(60.0, gt=0, description="A spool segment is rolled after this long.")
    roll_retry_max_s: float = Field(60.0, gt=0, description="Longest wait between retries of a failed roll.")
    # The object store: the spool stays the durability line, parts are uploaded from DATA_DIR/calls.
    store_url: str | None = Field(
        None,
        description="Also upload each rolled part to this storage URL (s3://bucket/run, gs://…, a folder) as "
        "STORE_URL/calls/<part>, removing it locally once the store confirmed it; credentials and endpoint "
        "from the environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS). Unset: parts stay in DATA_DIR/calls.",
    )
    upload_poll_s: float = Field(1.0, gt=0, description="With --store-url: seconds between looks for parts.")
    upload_backoff_max_s: float = Field(
        30.0,
        gt=0,
        description="With --store-url: longest wait between upload retries while the store is away.",
    )
    upload_drain_s: float = Field(
        30.0,
        ge=0,
        description="With --store-url: on shutdown, how long the last uploads may take; parts still local "
        "then are uploaded by the next start (or `python -m proxy.uploader`).",
    )

    @field_validator("upstream")
    @classmethod
    def _strip_slash(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("upstream must be an http:// or https:// URL")
        return v.rstrip("/")

    @field_validator("store_url")
    @classmethod
    def _store_url(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            # Uploads silently off would leave the calls on this host while the run expects them in the store.
            raise ValueError(
                "an empty store URL (an unset shell variable?); give a URL or leave the option out"
            )
        return v.strip() if v is not None else None

    @field_validator("client_key", mode="before")
    @classmethod
    def _keys(cls, v: Any) -> Any:
        keys = _key_list(v)
        if any(not isinstance(k, str) or not k.strip() for k in keys):
            raise ValueError(
                "an empty client key would let requests without a key through "
                "(an unset shell variable?); give a key or leave the option out"
            )
        return [k.strip() for k in keys]

    @property
    def client_keys(self) -> list[str]:
        return self.client_key

    @property
    def calls_dir(self) -> Path:
        return self.data_dir / "calls"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"


def _key_list(v: Any) -> list[Any]:
    """Keys from a list, a JSON list, or text with keys separated by spaces. A list that the
    command line split on spaces out of one JSON text (`'["a", "b"]'`) is put back together first."""
    if isinstance(v, list | tuple) and v and all(isinstance(x, str) for x in v):
        joined = " ".join(v).strip()
        if joined.startswith("["):
            v = joined
    if isinstance(v, str):
        text = v.strip()
        if text.startswith("["):
            try:
                decoded = json.loads(text)
            except ValueError:
                raise ValueError("client keys look like a JSON list but are not valid JSON") from None
            return decoded if isinstance(decoded, list) else [decoded]
        return text.split() or [text]
    return list(v) if isinstance(v, list | tuple) else [v]
