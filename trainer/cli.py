"""`python -m trainer …`: a thin registry of commands; each one's work lives in its own module."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from lm.standin.server import serve
from trainer.dflash.engine import engine_factory
from trainer.evaluate import eval_command
from trainer.export import export_command
from trainer.features import features_command, write_features_command
from trainer.memplan_cli import plan_memory_command
from trainer.parity_cli import parity_command
from trainer.regenerate import regenerate_command
from trainer.replay import replay_command
from trainer.speculators.cli import export_speculators_command, import_speculators_command
from trainer.submit import submit_command
from trainer.submit_extract import submit_extract_command
from trainer.train import train_command

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="dflash-factory trainer: the target model and the DFlash drafter trained on its traffic.",
)


@app.callback()
def main() -> None:
    """Every command is a named subcommand: `python -m trainer COMMAND`."""


class ServeTargetSettings(BaseModel):
    """`python -m trainer serve-target`: the stand-in server, optionally decoding with a DFlash drafter."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("smollm2", description="smollm2, tiny-qwen3, or a Hugging Face model directory.")
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=0, le=65535, description="Port to listen on.")
    max_model_len: int | None = Field(
        None, ge=1, description="Context length (prompt + completion); default: the model's positions."
    )
    served_model_name: str | None = Field(
        None, description="Model id in the API; default: the --model value."
    )
    max_num_seqs: int = Field(
        4, ge=1, description="Requests interleaved at once (one forward at a time); more wait."
    )
    cache_dir: Path | None = Field(
        None, description="Model cache; default $DFLASH_CACHE or ~/.cache/dflash-factory."
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="Torch CPU threads; default torch's choice. 1 decodes faster on a CPU shared with agents.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    max_tokens_cap: int | None = Field(
        None,
        ge=1,
        description="Stand-in only: lower any larger requested completion limit to this (agents ask for 32k).",
    )
    draft: Path | None = Field(
        None, description="A DFlash drafter directory (an export or RUN_DIR/drafter): speculative decoding."
    )
    prefix_cache_tokens: int = Field(
        32768,
        ge=0,
        description="Positions of prefilled prompts kept for reuse by their longest common prefix, as vLLM's "
        "prefix caching does (an agent's next call forwards only its new tokens); 0: none.",
    )


@app.command("serve-target")
@settings_command(ServeTargetSettings)
def serve_target(settings: ServeTargetSettings) -> None:
    """Serve a target on an OpenAI-compatible API shaped like vLLM's (CPU stand-in)."""
    options = settings.model_dump(exclude={"draft"})
    spec = (
        engine_factory(settings.draft, prefix_tokens=settings.prefix_cache_tokens) if settings.draft else None
    )
    serve(**options, engine_factory=spec)


# The drafter's commands: each implemented (with its settings model) in its own module.
app.command("train")(train_command)
app.command("eval")(eval_command)
app.command("export")(export_command)
app.command("submit")(submit_command)
app.command("replay")(replay_command)
app.command("export-speculators")(export_speculators_command)
app.command("import-speculators")(import_speculators_command)
app.command("submit-extract")(submit_extract_command)
app.command("features")(features_command)
app.command("parity")(parity_command)
app.command("regenerate")(regenerate_command)
app.command("write-features")(write_features_command)  # `features` for an existing run's data
app.command("plan-memory")(plan_memory_command)
