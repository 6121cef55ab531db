"""`python -m factory export|push`: the publish stage's commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from factory.cli_common import DataDir, Db, app, console, options_command
from factory.cli_common import db_sessions as _sessions
from factory.publish.export import ExportSettings, remembered
from factory.publish.export import export as do_export


@options_command(ExportSettings)
def export(
    settings: ExportSettings,
    data_dir: DataDir = Path("data"),
    db: Db = None,
    out: Annotated[Path | None, typer.Option(help="Default: DATA_DIR/dataset")] = None,
) -> None:
    """Write the dataset in the Hugging Face Hub layout (calls, trajectories, sequences, sessions). Made again
    into the same folder, it keeps the previous export's held_out, tokenizer, target_model and repo_id
    unless they are given."""
    dest = out or data_dir / "dataset"
    settings = ExportSettings(
        **{**remembered(dest), **settings.model_dump(include=settings.model_fields_set)}
    )
    s = do_export(
        _sessions(db, data_dir),
        data_dir,
        dest,
        settings,
        progress=lambda line: console.print(line, markup=False),
    )
    console.print(
        f"{dest}: {s.sessions} sessions, {s.calls} calls, {s.duplicates_dropped} duplicates dropped, "
        f"secrets scrubbed {dict(s.secrets) or 'none'}, calls keeping exact ids: "
        f"{'n/a' if s.exact_ids_fraction is None else f'{s.exact_ids_fraction:.1%}'}"
    )


@app.command()
def push(
    repo_id: Annotated[str, typer.Option(help="ORG/NAME on the Hub")],
    data_dir: DataDir = Path("data"),
    folder: Annotated[Path | None, typer.Option(help="Default: DATA_DIR/dataset")] = None,
    dry_run: Annotated[bool, typer.Option(help="List what would be uploaded")] = False,
    private: Annotated[bool, typer.Option()] = False,
    token: Annotated[str | None, typer.Option(envvar="HF_TOKEN")] = None,
) -> None:
    """Upload the exported dataset with huggingface_hub (resumable large-folder upload)."""
    from factory.publish.push import push as do_push

    files = do_push(folder or data_dir / "dataset", repo_id, dry_run=dry_run, private=private, token=token)
    for path, size in files:
        typer.echo(f"{size:>12,}  {path}")
    typer.echo(
        f"{'would upload' if dry_run else 'uploaded'} {len(files)} files, {sum(s for _, s in files):,} bytes "
        f"to datasets/{repo_id}"
    )
