"""`python -m proxy serve|roll`. `serve`'s options are generated from ProxySettings (clikit): each has its
DFLASH_PROXY_<NAME> environment variable, and its default lives in the model only."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from clikit import settings_command, source_of
from proxy.config import ProxySettings

app = typer.Typer(add_completion=False, help="The logging proxy between coding agents and the target model.")
log = logging.getLogger("proxy")


@app.command()
@settings_command(ProxySettings)
def serve(settings: ProxySettings) -> None:
    """Relay agent traffic to UPSTREAM and record every call under DATA_DIR/calls."""
    from proxy.app import create_app
    from proxy.server import build_server

    logging.basicConfig(level=settings.log_level.upper() if settings.log_level != "trace" else 5)
    log.info("settings: %s", describe(settings))
    app_ = create_app(settings)
    build_server(app_, settings).run()


def describe(settings: ProxySettings) -> str:
    """Each setting that was given, and where it came from (secrets shown as ***)."""
    shown = []
    for name in ProxySettings.model_fields:
        where = source_of(settings, name)
        if where == "default":
            continue
        value = getattr(settings, name)
        if name in ("upstream_key", "client_key"):
            value = f"{len(value) if isinstance(value, list) else 1} key(s)"
        shown.append(f"{name}={value} ({where})")
    return ", ".join(shown) or "all defaults"


@app.command()
def roll(
    data_dir: Annotated[
        Path, typer.Option(envvar="DFLASH_PROXY_DATA_DIR", help="The proxy's data folder.")
    ] = ProxySettings.model_fields["data_dir"].default,
) -> None:
    """Roll spool segments left by stopped or killed proxies into Parquet parts."""
    from proxy.roller import roll_data_dir

    typer.echo(roll_data_dir(data_dir))
