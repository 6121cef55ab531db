"""`python -m trainer …`: a thin registry of commands; each one's work lives in its own module."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="dflash-factory trainer: the target model and the DFlash drafter trained on its traffic.",
)


@app.callback()
def main() -> None:
    """Every command is a named subcommand: `python -m trainer COMMAND`."""


@app.command("serve-target")
def serve_target(
    model: str = typer.Option("smollm2", help="smollm2, tiny-qwen3, or a Hugging Face model directory."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    max_model_len: int | None = typer.Option(
        None, help="Context length (prompt + completion); default: the model's positions."
    ),
    served_model_name: str | None = typer.Option(
        None, help="Model id in the API; default: the --model value."
    ),
    max_num_seqs: int = typer.Option(
        4, help="Requests interleaved at once (one forward at a time); more wait."
    ),
    cache_dir: Path | None = typer.Option(
        None, help="Model cache; default $DFLASH_CACHE or ~/.cache/dflash-factory."
    ),
    threads: int | None = typer.Option(
        None, help="Torch CPU threads; default torch's choice. 1 decodes faster on a CPU shared with agents."
    ),
    log_level: str = typer.Option("info", help="debug, info, warning, error."),
    max_tokens_cap: int | None = typer.Option(
        None, help="Stand-in only: lower any larger requested completion limit to this (agents ask for 32k)."
    ),
    draft: Path | None = typer.Option(
        None,
        "--draft",
        help="A DFlash drafter directory (an export or RUN_DIR/drafter): speculative decoding.",
    ),
) -> None:
    """Serve a target on an OpenAI-compatible API shaped like vLLM's (CPU stand-in)."""
    from standin.server import serve

    factory = None
    if draft is not None:
        from trainer.dflash.engine import engine_factory

        factory = engine_factory(draft)
    serve(
        model,
        host=host,
        port=port,
        max_model_len=max_model_len,
        served_model_name=served_model_name,
        max_num_seqs=max_num_seqs,
        cache_dir=cache_dir,
        threads=threads,
        engine_factory=factory,
        log_level=log_level,
        max_tokens_cap=max_tokens_cap,
    )


# The drafter's commands: each implemented (with its options) in its own module.
from trainer.evaluate import eval_command  # noqa: E402
from trainer.export import export_command  # noqa: E402
from trainer.replay import replay_command  # noqa: E402
from trainer.submit import submit_command  # noqa: E402
from trainer.train import train_command  # noqa: E402

app.command("train")(train_command)
app.command("eval")(eval_command)
app.command("export")(export_command)
app.command("submit")(submit_command)
app.command("replay")(replay_command)
