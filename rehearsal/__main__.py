"""`python -m rehearsal serve`: the scripted brain on a port (docs/factory.md, "Rehearsing a campaign")."""

import typer

from clikit import settings_command
from rehearsal.server import serve as run_server
from rehearsal.settings import BrainSettings

app = typer.Typer(add_completion=False, no_args_is_help=True)


@app.callback()
def _main() -> None:
    """The scripted brain of a rehearsal."""


@app.command()
@settings_command(BrainSettings)
def serve(settings: BrainSettings) -> None:
    """Serve the scripted brain: Chat Completions with token ids, scripted sessions of 5–60 turns."""
    run_server(settings)


app(prog_name="python -m rehearsal")
