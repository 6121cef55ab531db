"""`python -m serving install | serve | check URL`."""

from __future__ import annotations

import typer

from clikit import settings_command
from serving.check import check_target
from serving.launch import VllmServer
from serving.serve import ServeError, exec_server
from serving.venv import install

app = typer.Typer(no_args_is_help=True, add_completion=False, help="vLLM as the project's serving engine.")


@app.command("install")
def install_command() -> None:
    """Install vLLM CPU into its own environment (.venv-vllm), once; say in one line when it cannot run."""
    install()


@app.command("serve")
@settings_command(VllmServer)
def serve_command(settings: VllmServer) -> None:
    """Become a vLLM server for the target, with the flags the agents need (docs/target.md)."""
    try:
        exec_server(settings)
    except ServeError as e:
        typer.echo(f"serving: {e}", err=True)
        raise typer.Exit(2) from None


@app.command("check")
def check_command(url: str) -> None:
    """Probe a target the way the agents use it; one line per problem (exit 1 when there is one)."""
    result = check_target(url)
    for problem in result.problems:
        typer.echo(f"check: {url}: {problem}", err=True)
    if result.problems:
        raise typer.Exit(1)
    typer.echo(f"check: {url} serves {result.model} ({result.max_model_len} tokens): ready for the agents")


if __name__ == "__main__":
    app()
