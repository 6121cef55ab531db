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
    assert "--upstream:" in out.stderr
    assert "--upstream-api:" in out.stderr
