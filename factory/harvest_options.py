"""Every option of `python -m factory harvest` (the command line is generated from them), and what they say
about the target it serves."""

from __future__ import annotations

from pydantic import Field, model_validator

from factory.run.plan import PlanOptions
from factory.run.runner_types import SANDBOX
from factory.run.runners import RAY_EGRESS, EgressOption, RunnerName
from factory.run.services import ServiceOptions
from serving.launch import served_template


class HarvestOptions(ServiceOptions, PlanOptions, EgressOption):
    """Every option of `harvest`; the command line is generated from these fields."""

    db: str | None = Field(default=None, description="SQLAlchemy URL (default: SQLite DATA_DIR/factory.db).")
    github_token: str | None = Field(
        default=None, description="GitHub token; unset: the bundled offline sample."
    )
    limit: int = Field(default=6, ge=0, description="Sessions to run.")
    # The CPU stand-in serves one forward at a time: more sessions only interleave.
    concurrency: int = Field(default=1, ge=1, description="Sessions run at once.")
    repos_limit: int | None = Field(
        default=None, ge=1, description="GitHub: the first N repositories of repos.yaml only."
    )
    translate_limit: int | None = Field(default=None, ge=0, description="Issues to translate at most.")
    translate_concurrency: int = Field(
        default=2, ge=1, description="Translation requests in flight at once (beside the sessions)."
    )
    session_timeout: float = Field(default=600.0, gt=0, description="Seconds an agent may run.")
    held_out: float = Field(
        default=0.05, ge=0, lt=1, description="Fraction of repositories in the test split."
    )
    image: str | None = Field(default=None, description="Agents image (default: build or find).")
    runner: RunnerName = Field(
        default=SANDBOX,
        description="sandbox (each agent in a Docker sandbox), or fake (scripted sessions, no Docker).",
    )
    sandbox_command: str | None = Field(
        default=None,
        description="Run this shell command in each sandbox instead of the agent ({session}: the attempt's "
        "proxy session id); for confinement checks and tests.",
    )
    ray: str | None = Field(
        default=None,
        description="Place the sessions on this Ray cluster (HEAD:6379) instead of this host (docs/factory.md).",
    )
    tokenizer: str | None = Field(
        default=None,
        description="The target's tokenizer (a folder or a Hub name) with which the export redacts a secret "
        "inside exact token ids; unset: what the target serves (its /v1/models root) when that is a folder "
        "here or a Hub name. Without one, a call whose text holds a secret loses its ids.",
    )
    chat_template: str | None = Field(
        default=None,
        description="The chat template (a jinja file) the target serves with, where it is not its "
        "tokenizer's: the export renders the chat view with it to check it against the prompt ids. Unset: "
        "the --chat-template of --target-arg, or the project's for a SmolLM2 target started here.",
    )
    store_url: str | None = Field(
        default=None,
        description="Where the calls and transcripts land and the export reads them (s3://…, gs://…, a folder); "
        "with --ray, the nodes' store. Unset: DATA_DIR/calls.",
    )

    @model_validator(mode="after")
    def _egress_here_only(self) -> HarvestOptions:
        if self.ray and self.egress:
            raise ValueError(RAY_EGRESS)
        return self

    def served_template(self) -> str | None:
        """The template the target renders with when it is not its tokenizer's (the export checks the chat
        view with it): the one given, a `--chat-template` in `--target-arg`, the project's for a SmolLM2
        target started here."""
        args = list(self.target_arg)
        if self.chat_template or "--chat-template" in args[:-1]:
            return self.chat_template or args[args.index("--chat-template") + 1]
        return None if self.target_url else served_template(self.target_model)
