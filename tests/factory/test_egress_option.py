"""`--egress none|registries` on `harvest` and `run` (issue 14): the option reaches the sandbox settings of
the session runner the command builds, over `DFLASH_SANDBOX_EGRESS`, without touching the process
environment; a bad value and `--egress` with `--ray` are refused before anything starts."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from factory.cli import app
from factory.harvest import HarvestOptions, _session_runner
from factory.run.ledger import Ledger
from factory.run.runners import RAY_EGRESS
from factory.run.sandbox_runner import SandboxSessionRunner


def test_harvest_refuses_a_bad_egress_and_egress_with_ray(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["harvest", "--data-dir", str(tmp_path), "--egress", "everything"])
    assert r.exit_code == 2, r.output
    assert "--egress" in r.output
    assert "none" in r.output
    assert "registries" in r.output
    r = CliRunner().invoke(
        app, ["harvest", "--data-dir", str(tmp_path), "--egress", "registries", "--ray", "head:6379"]
    )
    assert r.exit_code == 2, r.output
    assert "DFLASH_SANDBOX_EGRESS on the nodes" in " ".join(r.output.split())
    r = CliRunner().invoke(
        app, ["run", "--data-dir", str(tmp_path), "--egress", "none", "--ray", "head:6379"]
    )
    assert r.exit_code == 2, r.output
    assert RAY_EGRESS in " ".join(r.output.split())
    assert not (tmp_path / "factory.db").exists()  # refused before anything started


@pytest.fixture
def built_runners(monkeypatch: pytest.MonkeyPatch) -> list[SandboxSessionRunner]:
    """Every real SandboxSessionRunner the command builds (a spy on `from_args`, the runner itself is real)."""
    built: list[SandboxSessionRunner] = []
    real = SandboxSessionRunner.from_args.__func__  # type: ignore[attr-defined]

    def spy(cls: type[SandboxSessionRunner], args: Any) -> SandboxSessionRunner:
        runner: SandboxSessionRunner = real(cls, args)
        built.append(runner)
        return runner

    monkeypatch.setattr(SandboxSessionRunner, "from_args", classmethod(spy))
    return built


@pytest.mark.docker
def test_run_builds_its_sandboxes_with_the_egress_option(  # type: ignore[no-untyped-def]
    docker_client,
    agents_image: str,
    tmp_path: Path,
    built_runners: list[SandboxSessionRunner],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DFLASH_SANDBOX_EGRESS", "none")
    base = [
        "run",
        "--data-dir",
        str(tmp_path),
        "--proxy-url",
        "http://127.0.0.1:9",
        "--runner",
        "sandbox",
        "--image",
        agents_image,
        "--limit",
        "0",
    ]
    r = CliRunner().invoke(app, [*base, "--egress", "registries"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, base)  # unset: the environment's policy
    assert r.exit_code == 0, r.output
    assert [b.settings.egress for b in built_runners] == ["registries", "none"]
    assert os.environ["DFLASH_SANDBOX_EGRESS"] == "none"


@pytest.mark.docker
def test_harvest_builds_its_sandboxes_with_the_egress_option(  # type: ignore[no-untyped-def]
    docker_client, agents_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DFLASH_SANDBOX_EGRESS", raising=False)
    ledger = Ledger(tmp_path, "egress-test", sandboxes=True)
    console = Console(file=io.StringIO())
    for egress, expected in (("registries", "registries"), (None, "none")):
        opts = HarvestOptions(data_dir=tmp_path, image=agents_image, egress=egress)
        runner = _session_runner(opts, "target", ledger, console)
        assert isinstance(runner, SandboxSessionRunner)
        assert runner.settings.egress == expected
    assert "DFLASH_SANDBOX_EGRESS" not in os.environ
