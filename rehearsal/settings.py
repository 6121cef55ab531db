"""The brain's one settings model: where it listens and the distributions its sessions are drawn from."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class BrainSettings(BaseSettings):
    """`python -m rehearsal serve`'s options (environment: DFLASH_BRAIN_*)."""

    model_config = SettingsConfigDict(env_prefix="DFLASH_BRAIN_")

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8000, ge=0, le=65535, description="Port to listen on.")
    model: str = Field(default="scripted-brain", description="The model id it serves.")
    max_model_len: int = Field(default=131072, ge=16384, description="The context it reports.")
    seed: int = Field(default=0, description="Seed of every draw (a session's draws also hang on its task).")
    # Agent traces: most sessions take 10–30 turns, a long tail reaches the agents' own limits.
    turns_median: float = Field(default=18.0, gt=0, description="Median turns (model calls) of a session.")
    turns_sigma: float = Field(default=0.6, ge=0, description="Log-normal spread of a session's turns.")
    turns_min: int = Field(default=5, ge=1, description="Fewest turns of a session.")
    turns_max: int = Field(default=60, ge=1, description="Most turns of a session.")
    completion_median: float = Field(
        default=90.0, gt=0, description="Median tokens of a turn's text (before its tool call)."
    )
    completion_sigma: float = Field(default=0.8, ge=0, description="Log-normal spread of a turn's text.")
    completion_max: int = Field(default=1500, ge=1, description="Most tokens of a turn's text.")
    # A GPU vLLM under agent load: a few hundred ms to the first token, tens of tokens a second per stream.
    ttft_ms: float = Field(default=250.0, ge=0, description="Median time to the first token (ms).")
    token_ms: float = Field(default=12.0, ge=0, description="Time per generated token (ms).")
    latency_sigma: float = Field(default=0.5, ge=0, description="Log-normal spread of the first-token time.")
    latency_scale: float = Field(
        default=1.0, ge=0, description="Multiplies every latency (0: answer at once, for throughput runs)."
    )
