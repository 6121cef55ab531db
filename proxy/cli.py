"""`python -m proxy serve|roll`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, help="The logging proxy between coding agents and the target model.")


@app.command()
def serve(
    upstream: Annotated[str, typer.Option(envvar="DFLASH_PROXY_UPSTREAM", help="Target base URL")],
    host: Annotated[str, typer.Option(envvar="DFLASH_PROXY_HOST")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="DFLASH_PROXY_PORT")] = 8100,
    data_dir: Annotated[Path, typer.Option(envvar="DFLASH_PROXY_DATA_DIR")] = Path("data"),
    upstream_key: Annotated[str | None, typer.Option(envvar="DFLASH_PROXY_UPSTREAM_KEY")] = None,
    client_key: Annotated[list[str] | None, typer.Option(help="Accepted client key (repeatable)")] = None,
    upstream_api: Annotated[
        str, typer.Option(envvar="DFLASH_PROXY_UPSTREAM_API", help="native|chat")
    ] = "native",
    return_token_ids: Annotated[bool, typer.Option(envvar="DFLASH_PROXY_RETURN_TOKEN_IDS")] = True,
    tokenize_native: Annotated[bool, typer.Option(envvar="DFLASH_PROXY_TOKENIZE_NATIVE")] = False,
    upstream_transport: Annotated[
        str, typer.Option(envvar="DFLASH_PROXY_UPSTREAM_TRANSPORT", help="aiohttp|httpx")
    ] = "aiohttp",
    segment_max_age_s: Annotated[float, typer.Option(envvar="DFLASH_PROXY_SEGMENT_MAX_AGE_S")] = 60.0,
    log_level: Annotated[str, typer.Option()] = "warning",
) -> None:
    """Relay agent traffic to UPSTREAM and record every call under DATA_DIR/calls."""
    import uvicorn
    from pydantic import SecretStr, ValidationError

    from proxy.app import create_app
    from proxy.config import ProxySettings

    try:
        settings = ProxySettings(
            upstream=upstream,
            host=host,
            port=port,
            data_dir=data_dir,
            upstream_key=SecretStr(upstream_key) if upstream_key else None,
            client_keys=client_key or [],
            upstream_api=upstream_api,  # type: ignore[arg-type]
            return_token_ids=return_token_ids,
            tokenize_native=tokenize_native,
            upstream_transport=upstream_transport,  # type: ignore[arg-type]
            segment_max_age_s=segment_max_age_s,
        )
    except ValidationError as exc:
        for err in exc.errors():
            typer.echo(
                f"error: --{'-'.join(str(p) for p in err['loc']).replace('_', '-')}: {err['msg']}", err=True
            )
        raise typer.Exit(2) from None
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=False,
        # The upstream's own Date/Server headers are relayed; uvicorn must not add a second pair.
        server_header=False,
        date_header=False,
    )


@app.command()
def roll(data_dir: Annotated[Path, typer.Option(envvar="DFLASH_PROXY_DATA_DIR")] = Path("data")) -> None:
    """Roll spool segments left by stopped or killed proxies into Parquet parts."""
    from proxy.roller import roll_all

    segments, calls = roll_all(data_dir / "spool", data_dir / "calls")
    typer.echo(f"rolled {calls} calls from {segments} segments into {data_dir / 'calls'}")
