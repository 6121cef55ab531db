"""Realistic sessions in Docker: a Python repository's environment image installs its PyPI dependency through
the egress proxy, the tests run before and after a scripted fix, and the session says it resolved the issue.
Bad input (a failing setup, a hanging test, no disk) is recorded with its reason and the session still runs.

The "agent" here is the `command` pseudo-agent running a fixed script (run the tests, apply the fix): what is
under test is the environment and the test outcome around it, not a CLI (tests/sandboxes/test_agents.py).
PyPI is reached for real, through squid (the one registry this machine can reach).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandboxes.cli import app as cli_app
from sandboxes.config import SandboxSettings
from sandboxes.envimage import gc_env_images
from sandboxes.environment import prepare
from sandboxes.session import run_session
from tests.sandboxes.conftest import base_commit
from tests.sandboxes.sessions import command_request, patched_files

pytestmark = [pytest.mark.docker, pytest.mark.slow]
FIX = "sed -i 's/return a - b/return a + b/' calc/__init__.py"

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "calc"
version = "0.1.0"
dependencies = ["six"]

[tool.setuptools]
packages = ["calc"]
"""
TESTS = """\
import six

from calc import add


def test_add():
    assert add(2, 2) == 4


def test_dependency_installed():
    assert six.PY3
"""


def python_repo(root: Path) -> tuple[Path, str]:
    """A package whose `add` subtracts: test_add fails, and the other test needs `six` from PyPI."""
    repo = root / "calc-repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    return repo, base_commit(repo)


@pytest.fixture
def settings(tmp_path: Path) -> SandboxSettings:
    return SandboxSettings(
        env_state_dir=tmp_path / "state",
        setup_time_limit_s=300,
        test_time_limit_s=120,
        env_min_free_gb=1,
        egress="registries",
    )


def _session(prepared_fields: dict[str, object], repo: Path, sha: str, settings: SandboxSettings, cmd: str):  # type: ignore[no-untyped-def]
    fields = {"task": "fix add", "time_limit_s": 120, "settings": settings, **prepared_fields}
    return run_session(command_request((repo, sha), cmd, **fields))


def test_python_environment_image_baseline_fails_after_fix_passes(
    docker_client,
    agents_image: str,
    settings: SandboxSettings,
    tmp_path: Path,
) -> None:
    repo, sha = python_repo(tmp_path)
    repo_id = f"test/calc-{uuid.uuid4().hex[:6]}"
    prepared = prepare(docker_client, settings, agents_image, repo, sha, repo_id=repo_id)
    try:
        setup = prepared.setup
        assert setup["status"] == "built", (setup["reason"], setup["tail"])
        hosts = {h["host"] for h in setup["egress"] if h["status"].startswith("TCP_TUNNEL")}
        assert {"pypi.org", "files.pythonhosted.org"} <= hosts, setup["egress"]
        assert prepared.test_command == "python -m pytest -rA -p no:cacheprovider"

        result = _session(prepared.request_fields(), repo, sha, settings, f"python -m pytest -q; {FIX}")
        assert result.status == "succeeded", (result.reason, result.stderr)
        assert "copy_repo" not in result.timings  # the checkout came with the image
        assert result.baseline is not None
        assert result.after is not None
        assert (result.baseline["passed"], result.baseline["failed"]) == (1, 1), result.baseline["tail"]
        assert result.baseline["tests"]["tests/test_calc.py::test_add"] == "failed"
        assert (result.after["passed"], result.after["failed"]) == (2, 0), result.after["tail"]
        assert result.resolved is True
        # The patch is the fix alone: no egg-info, venv or cache the setup or the test runs left.
        assert patched_files(result) == ["+++ b/calc/__init__.py"], result.patch
        assert json.dumps(result.to_dict())

        again = prepare(docker_client, settings, agents_image, repo, sha, repo_id=repo_id)
        assert again.setup["status"] == "cached"
        assert again.image == prepared.image
    finally:
        # The GC keeps a fresh image within budget, and removes it once over the budget (this repo's only).
        assert gc_env_images(docker_client, settings, repo_id=repo_id) == []
        tiny = settings.model_copy(update={"env_budget_gb": 1e-6})
        assert gc_env_images(docker_client, tiny, repo_id=repo_id, dry_run=True) == [prepared.image]
        # (after a build the runner collects with the new image kept: a session is about to start in it)
        assert gc_env_images(docker_client, tiny, repo_id=repo_id, dry_run=True, keep=prepared.image) == []
        # …and past its age (a clock 15 days on), as `python -m sandboxes env-gc` says.
        later = time.time() + 15 * 86400
        assert gc_env_images(docker_client, settings, repo_id=repo_id, dry_run=True, now=later) == [
            prepared.image
        ]
        result = CliRunner().invoke(
            cli_app, ["env-gc", "--repo", repo_id, "--budget-gb", "0.000001", "--dry-run"]
        )
        assert f"would remove {prepared.image}" in result.stdout, result.output
        assert gc_env_images(docker_client, tiny, repo_id=repo_id) == [prepared.image]
        assert not docker_client.images.list(filters={"label": f"dflash.env.repo={repo_id}"})


def test_failing_setup_is_recorded_retried_a_bounded_number_of_times_and_the_session_runs(
    docker_client, agents_image: str, settings: SandboxSettings, tmp_path: Path
) -> None:
    repo, sha = python_repo(tmp_path)
    settings = settings.model_copy(update={"setup_retries": 2})
    bad = "echo resolving deps; echo 'no matching distribution' >&2; exit 3"
    outcomes = [prepare(docker_client, settings, agents_image, repo, sha, setup=bad).setup for _ in range(3)]
    assert [o["status"] for o in outcomes] == ["failed"] * 3
    assert "exit code 3" in str(outcomes[0]["reason"])
    assert "no matching distribution" in str(outcomes[0]["tail"])
    assert [o["attempts"] for o in outcomes] == [1, 2, 2]
    assert "not retried" in str(outcomes[2]["reason"])
    state = next((settings.env_state_dir / "env").glob("*.json"))
    assert json.loads(state.read_text())["attempts"] == 2

    # The run goes on: the session starts from the family image with a copy of the tree.
    prepared = prepare(docker_client, settings, agents_image, repo, sha, setup=bad)
    assert prepared.prepared_base is None
    result = _session(prepared.request_fields(), repo, sha, settings, FIX)
    assert result.status == "succeeded", result.reason
    assert result.setup is not None
    assert result.setup["status"] == "failed"
    assert "copy_repo" in result.timings
    assert result.baseline is not None
    assert result.baseline["failed"] + result.baseline["errors"] >= 1


def test_hanging_tests_and_a_full_disk_are_recorded(
    docker_client, agents_image: str, settings: SandboxSettings, tmp_path: Path
) -> None:
    repo, sha = python_repo(tmp_path)
    full = settings.model_copy(update={"env_min_free_gb": 10**9, "test_time_limit_s": 3})
    prepared = prepare(
        docker_client, full, agents_image, repo, sha, test="echo started; sleep 600; echo finished"
    )
    assert prepared.setup["status"] == "failed"
    assert str(prepared.setup["reason"]).startswith("out of disk:")
    assert prepared.setup["attempts"] == 0  # the machine's fault, not the repository's
    # a disk that fills while the setup installs: also the machine's, not counted against the repository
    filled = prepare(
        docker_client,
        settings,
        agents_image,
        repo,
        sha,
        setup="echo 'OSError: [Errno 28] No space left on device' >&2; exit 1",
    ).setup
    assert filled["status"] == "failed"
    assert str(filled["reason"]).startswith("out of disk during setup"), filled["reason"]
    assert filled["attempts"] == 0
    result = _session(prepared.request_fields(), repo, sha, full, FIX)
    assert result.status == "succeeded", result.reason
    for outcome in (result.baseline, result.after):
        assert outcome is not None
        assert outcome["timed_out"] is True
        assert "started" in outcome["tail"]
        assert "finished" not in outcome["tail"]  # killed at the 3 s limit, not run to its end
    assert result.resolved is None
