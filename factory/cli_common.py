"""What every `python -m factory` command shares: the app, the console, the data-folder options."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from clikit import settings_command
from factory.db import connect, default_url, session_factory

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="repos, issues, sample, translate, plan, run, status, reap, export, push, harvest.",
)
repos_app = typer.Typer(add_completion=False, help="The repository registry (repos.yaml).")
app.add_typer(repos_app, name="repos")
console = Console(stderr=True, soft_wrap=True)  # off a terminal: one line per message


def options_command(options: type[BaseModel]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`@app.command()` over `@settings_command(options)`: a command whose options are `options`' fields
    and the function's own."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        return app.command()(settings_command(options)(fn))

    return register


DataDir = Annotated[
    Path, typer.Option("--data-dir", envvar="DFLASH_DATA_DIR", help="Database, calls, dataset.")
]
Db = Annotated[
    str | None,
    typer.Option(
        "--db", envvar="DFLASH_DB_URL", help="SQLAlchemy URL (default: SQLite DATA_DIR/factory.db)."
    ),
]


def db_sessions(db: str | None, data_dir: Path) -> sessionmaker[OrmSession]:
    return session_factory(connect(db or default_url(data_dir)))
