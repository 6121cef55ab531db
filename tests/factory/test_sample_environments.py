"""What `make harvest` does with the bundled sample's sessions, less the model: the factory's own sandbox runner
claims each session, runs it in its repository's environment image (checkout included, no copy of the tree)
with the sample's `test:` command before and after, and the exported `sessions` config carries the outcome.

The agent is the `command` pseudo-agent (`true`), the same runner with the CLI swapped out: what is under test
is the environment and the test outcome around the agent, which `make harvest`'s sessions share; the real CLIs
against a model are tests/factory/test_harvest_e2e.py and tests/sandboxes/test_agents.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from factory.db import Session, connect, session_factory
from factory.ingest import sample
from factory.publish.export import export
from factory.run.plan import PlanConfig, plan
from factory.run.runner import RunConfig, Runner
from factory.run.runner_types import SessionSpec
from factory.run.sandbox_runner import SandboxSessionRunner
from sandboxes.envimage import gc_env_images
from sandboxes.session import SessionRequest

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class CommandAgentRunner(SandboxSessionRunner):
    """The factory's sandbox runner, its agent replaced by a shell command that changes nothing."""

    def request(self, spec: SessionSpec) -> SessionRequest:
        return dataclasses.replace(super().request(spec), command="true")


def test_sample_sessions_run_in_environment_images_and_export_their_tests(  # type: ignore[no-untyped-def]
    docker_client, agents_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DFLASH_SANDBOX_ENV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DFLASH_SANDBOX_ENV_MIN_FREE_GB", "1")
    sessions = session_factory(connect(f"sqlite:///{tmp_path / 'factory.db'}"))
    data = tmp_path / "data"
    sample.install(sessions, data / "sample-repos")
    planned = plan(sessions, PlanConfig(agents={"codex": 1.0}, langs={"en": 1.0})).added  # one per issue
    runner = CommandAgentRunner(image=agents_image, time_limit_s=60, run_id="sample-env-test")
    try:
        stats = Runner(sessions, runner, RunConfig(proxy_url="http://127.0.0.1:9", data_dir=data)).run()
        assert (stats.done, stats.infra_failed) == (planned, 0)
        with sessions() as s:
            rows = list(s.scalars(select(Session)))
        for row in rows:
            setup = (row.environment or {}).get("setup") or {}
            assert setup.get("status") in ("built", "cached"), setup
            assert str(setup.get("image")).startswith(f"{runner.settings.image_repo}-env:"), setup
    finally:
        for repo in sample.load():  # this test's images only (an image in use is skipped)
            gc_env_images(
                docker_client, runner.settings.model_copy(update={"env_budget_gb": 1e-6}), repo_id=repo.name
            )

    export(sessions, data, data / "dataset", held_out=0)
    exported = [
        row
        for f in sorted((data / "dataset" / "data" / "sessions").rglob("*.parquet"))
        for row in pq.read_table(f).to_pylist()
    ]
    tests = {s.name: s.test for s in sample.load()}
    assert len(exported) == len(rows)
    for row in exported:
        assert row["test_command"] == tests[row["repo"]]
        assert row["setup_status"] in ("built", "cached")
        for run in ("baseline", "after"):
            assert row[f"{run}_exit_code"] is not None, row
            assert row[f"{run}_timed_out"] is False
            assert row[f"{run}_tail"], row
        if row["repo_language"] == "Python":  # unittest -v names every test
            assert row["baseline_passed"] + row["baseline_failed"] + row["baseline_errors"] > 0, row
        # The agent changed nothing: the tests come out as they went in, and nothing was resolved.
        assert (row["after_passed"], row["after_failed"]) == (row["baseline_passed"], row["baseline_failed"])
        assert row["resolved"] is not True
