"""clikit: a typer command generated from a pydantic settings model (a default lives only in the model)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Literal

import typer
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from typer.testing import CliRunner

from clikit import settings_command, source_of


class Demo(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLIKIT_DEMO_", extra="ignore")
    upstream: str = Field(description="Base URL.")
    port: int = Field(8100, description="Port.")
    data_dir: Path = Field(Path("data"), description="Data folder.")
    keys: list[str] = Field(default_factory=list, description="Accepted keys (repeatable).")
    api: Literal["native", "chat"] = Field("native", description="Upstream API.")
    flag: bool = Field(True, description="A switch.")


seen: list[tuple[Demo, str]] = []
app = typer.Typer()


@app.command()
@settings_command(Demo)
def serve(settings: Demo, log_level: str = typer.Option("warning", help="Log level.")) -> None:
    seen.append((settings, log_level))


@app.command()
def other() -> None:
    """A second command, so typer keeps subcommands."""


def _run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    seen.clear()
    res = CliRunner().invoke(app, ["serve", *args], env=env)
    return res.exit_code, res.output


def test_unset_options_take_the_models_defaults() -> None:
    code, _ = _run(["--upstream", "http://x"])
    assert code == 0
    ((settings, level),) = seen
    assert settings == Demo(upstream="http://x")
    assert level == "warning"
    assert source_of(settings, "port") == "default"


def test_command_line_lists_flags_and_choices() -> None:
    code, out = _run(["--upstream", "http://x", "--keys", "a", "--keys", "b", "--no-flag", "--api", "chat"])
    assert code == 0, out
    settings = seen[0][0]
    assert (settings.keys, settings.flag, settings.api) == (["a", "b"], False, "chat")
    assert source_of(settings, "keys") == "command line"


def test_environment_is_read_and_named() -> None:
    code, out = _run(
        ["--upstream", "http://x"], env={"CLIKIT_DEMO_PORT": "9", "CLIKIT_DEMO_KEYS": '["k1", "k2"]'}
    )
    assert code == 0, out
    settings = seen[0][0]
    assert (settings.port, settings.keys) == (9, ["k1", "k2"])
    assert source_of(settings, "port") == "environment"


def test_a_bad_value_names_the_option_and_its_source() -> None:
    code, out = _run(["--upstream", "http://x", "--api", "grpc"])
    assert code == 2
    assert "--api (from command line)" in out
    code, out = _run(["--upstream", "http://x"], env={"CLIKIT_DEMO_PORT": "many"})
    assert code == 2
    assert "--port (from environment CLIKIT_DEMO_PORT)" in out


def test_help_shows_descriptions_defaults_and_env() -> None:
    out = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert "Upstream API. One of: native, chat." in out
    assert "(default: 8100)" in out
    assert "CLIKIT_DEMO_PORT" in out


def test_sources_belong_to_their_settings_object_alone() -> None:
    code, out = _run(["--upstream", "http://x", "--keys", "a"])
    assert code == 0, out
    settings = seen[0][0]
    assert source_of(settings, "keys") == "command line"
    twin = settings.model_copy()  # equal, but not the object the command built
    assert source_of(twin, "keys") == "default"
    seen.clear()
    del settings
    gc.collect()
    assert source_of(Demo(upstream="http://y"), "keys") == "default"  # a later object, maybe the same id
