"""`python -m factory rehearse`'s one options model (the command line is generated from it)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from factory.rehearse.campaign import CampaignShape

Fault = Literal["proxy", "runner", "driver", "postgres", "disk"]


class RehearseOptions(CampaignShape):
    """Plan the seed's campaign, run `sessions` of it through the real machinery, export, report."""

    data_dir: Path = Field(default=Path("data/rehearsal"), description="The rehearsal's own data folder.")
    db: str | None = Field(default=None, description="SQLAlchemy URL (default: SQLite DATA_DIR/factory.db).")
    sessions: int = Field(default=120, ge=1, description="Sessions to run to their end (over every resume).")
    runners: int = Field(
        default=2, ge=1, description="Runner processes (`factory run`), each with --workers."
    )
    workers: int = Field(default=6, ge=1, description="Sessions each runner process runs at once.")
    proxies: int = Field(
        default=2, ge=1, description="Proxy processes; runner i sends its agents to proxy i mod N."
    )
    fault: list[Fault] = Field(
        default_factory=list,
        description="Inject this fault (repeatable; spread over the run): proxy, runner or driver (kill -9), "
        "postgres (a restart; needs --db postgresql://… on this host), disk (the data folder filled for "
        "--disk-full-s; needs --disk-limit-mb).",
    )
    disk_limit_mb: int | None = Field(
        default=None,
        ge=64,
        description="Mount a tmpfs of this size on the data folder (root only) so the disk fault can fill it.",
    )
    disk_full_s: float = Field(default=20.0, gt=0, description="Seconds the data folder stays full.")
    latency_scale: float = Field(
        default=0.25, ge=0, description="The brain's latencies × this (1: a GPU vLLM's; 0: none)."
    )
    turns_median: float = Field(default=18.0, gt=0, description="The brain's median turns per session.")
    seed: int = Field(default=0, description="Seed of the plan and of the brain.")
    lease_s: float = Field(default=60.0, gt=0, description="Queue lease seconds (renewed while running).")

    @property
    def report_dir(self) -> Path:
        """The report, the driver's status lines and the agents' acknowledged-call logs."""
        return self.data_dir / "report"

    queue_probe_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds of claim/finish with no work on a copy of the queue (0: skip).",
    )
