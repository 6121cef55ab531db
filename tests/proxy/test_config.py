"""Settings come from flags or DFLASH_PROXY_* environment variables; bad values name the field."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from proxy.config import ProxySettings
from tests.support import REPO_ROOT


def test_environment_variables_configure_the_proxy(monkeypatch, tmp_path):
    monkeypatch.setenv("DFLASH_PROXY_UPSTREAM", "http://gpu:8000/")
    monkeypatch.setenv("DFLASH_PROXY_UPSTREAM_API", "chat")
    monkeypatch.setenv("DFLASH_PROXY_CLIENT_KEYS", '["a", "b"]')
    monkeypatch.setenv("DFLASH_PROXY_DATA_DIR", str(tmp_path))
    s = ProxySettings()  # type: ignore[call-arg]
    assert s.upstream == "http://gpu:8000"
    assert s.upstream_api == "chat"
    assert s.client_keys == ["a", "b"]
    assert s.calls_dir == tmp_path / "calls"


def test_bad_settings_are_rejected_with_the_field_named(tmp_path):
    with pytest.raises(ValidationError, match="upstream"):
        ProxySettings(upstream="gpu:8000")
    out = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--upstream", "ftp://x", "--upstream-api", "grpc"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    # Each bad option is named, with where its value came from (clikit's report).
    assert "--upstream (from command line):" in out.stderr
    assert "--upstream-api (from command line):" in out.stderr


def test_every_setting_is_an_option_with_its_environment_variable_and_a_description():
    import typer

    from proxy.cli import app

    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    options = {p.name: p for p in serve.params}
    for name, field in ProxySettings.model_fields.items():
        assert field.description, name
        assert options[name].envvar == f"DFLASH_PROXY_{name.upper()}", name
    assert "--client-key" in options["client_key"].opts
    assert options["client_key"].multiple


def test_client_keys_are_read_from_either_variable_and_an_empty_one_is_refused(monkeypatch):
    monkeypatch.setenv("DFLASH_PROXY_CLIENT_KEY", "K1 K2")
    assert ProxySettings(upstream="http://x").client_keys == ["K1", "K2"]
    monkeypatch.setenv("DFLASH_PROXY_CLIENT_KEY", "")
    with pytest.raises(ValidationError, match="empty client key"):
        ProxySettings(upstream="http://x")
    monkeypatch.delenv("DFLASH_PROXY_CLIENT_KEY")
    with pytest.raises(ValidationError, match="empty client key"):
        ProxySettings(upstream="http://x", client_key=["K1", " "])
    monkeypatch.setenv("CLIENT_KEYS", '["stray"]')  # only the prefixed names configure the proxy
    assert ProxySettings(upstream="http://x").client_keys == []


def test_the_proxy_logs_where_each_given_setting_came_from(monkeypatch, caplog):
    import logging

    from typer.testing import CliRunner

    import proxy.server
    from proxy.cli import app

    class NoServer:
        def run(self) -> None:
            pass

    monkeypatch.setattr(proxy.server, "build_server", lambda app_, settings: NoServer())
    with caplog.at_level(logging.INFO, logger="proxy"):
        res = CliRunner().invoke(
            app,
            ["serve", "--upstream", "http://x", "--port", "9", "--log-level", "info", "--data-dir", "/tmp/x"],
            env={"DFLASH_PROXY_CLIENT_KEY": '["a", "b"]'},
        )
    assert res.exit_code == 0, res.output
    assert "port=9 (command line)" in caplog.text
    assert "client_key=2 key(s) (environment)" in caplog.text
