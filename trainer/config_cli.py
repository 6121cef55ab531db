"""What every command that reads a run config shares: `--config FILE`, `--set key=value`, and a config that
does not load said in one line with exit status 2 (the train, features and plan-memory commands)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from trainer.config import ConfigError, TrainConfig

ConfigFile = Annotated[
    Path | None, typer.Option("--config", "-c", help="A run config YAML (trainer/configs/*.yaml).")
]
Overrides = Annotated[
    list[str] | None, typer.Option("--set", help="Override one config key: key=value (a YAML value).")
]


def load_or_exit(
    path: Path | None, overrides: list[str] | None, explicit: Mapping[str, Any] | None = None
) -> TrainConfig:
    """`TrainConfig.load`, for a command: what is wrong with the file or an override is printed, exit 2."""
    try:
        return TrainConfig.load(path, overrides or (), explicit)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
