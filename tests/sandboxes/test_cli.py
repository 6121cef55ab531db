"""`python -m sandboxes`: the options of every command come from its settings model (clikit), and a bad
value is refused before any Docker engine is asked, naming its option."""

from __future__ import annotations

from typer.testing import CliRunner

from sandboxes.cli import EnvGcOptions, app


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_the_documented_commands_and_options_are_there() -> None:
    code, out = invoke("--help")
    assert code == 0
    assert all(name in out for name in ("build", "gc", "env-gc", "try"))
    _, out = invoke("gc", "--help")
    assert all(opt in out for opt in ("--run", "--all", "--dry-run", "--json"))
    _, out = invoke("env-gc", "--help")
    assert all(opt in out for opt in ("--max-age-days", "--budget-gb", "--repo", "--dry-run"))
    _, out = invoke("try", "--help")
    for opt in (
        "--agent",
        "--egress",
        "--env",
        "--setup",
        "--test",
        "--repo",
        "--commit",
        "--task",
        "--proxy",
        "--session",
        "--run",
        "--command",
        "--model",
        "--time-limit",
        "--image",
        "--compact",
    ):
        assert opt in out


def test_try_needs_a_task_or_a_command() -> None:
    code, out = invoke("try", "--repo", ".", "--commit", "HEAD", "--proxy", "http://127.0.0.1:9")
    assert code == 2
    assert "--task (from default)" in out
    assert "--command" in out


def test_a_bad_value_names_its_option() -> None:
    code, out = invoke("env-gc", "--budget-gb", "0")
    assert code == 2
    assert "--budget-gb (from command line)" in out
    code, out = invoke(
        "try", "--agent", "nobody", "--repo", ".", "--commit", "HEAD", "--proxy", "x", "--task", "t"
    )
    assert code == 2
    assert "--agent (from command line)" in out


def test_env_gc_limits_replace_the_sandbox_settings_only_when_given() -> None:
    settings = EnvGcOptions(budget_gb=2.5).sandbox_settings()
    assert settings.env_budget_gb == 2.5
    assert settings.env_max_age_days == EnvGcOptions().sandbox_settings().env_max_age_days
