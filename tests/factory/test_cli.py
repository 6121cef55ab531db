"""The `python -m factory` command line on the pieces that need no services."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select
from typer.testing import CliRunner

from factory.cli import app
from factory.db import Issue, Repo, Session, connect, default_url, session_factory

from .fake_github import FakeGitHub, FakeRepo

runner = CliRunner()


def test_repos_check_valid_and_invalid(tmp_path):
    r = runner.invoke(app, ["repos", "check"])
    assert r.exit_code == 0, r.output
    bad = tmp_path / "repos.yaml"
    bad.write_text("repos:\n  - {name: a/b, language: Python, license: Beerware}\n")
    r = runner.invoke(app, ["repos", "check", "--path", str(bad)])
    assert r.exit_code == 1
    assert "repos[0] (a/b).license" in r.output


def test_repos_check_online_reports_404s(tmp_path):
    f = tmp_path / "repos.yaml"
    f.write_text(
        "repos:\n  - {name: o/r, language: Go, license: MIT}\n  - {name: gone/away, language: Go, license: MIT}\n"
    )
    with FakeGitHub() as gh:
        gh.add(FakeRepo("o/r"))
        r = runner.invoke(app, ["repos", "check", "--path", str(f), "--online", "--api-url", gh.url])
    assert r.exit_code == 1
    assert "404" in r.output
    assert "gone/away" in r.output
    assert "1 of 2 not found" in r.output


def test_sample_plan_status_and_push_dry_run(tmp_path):
    d = str(tmp_path / "data")
    assert runner.invoke(app, ["sample", "--data-dir", d]).exit_code == 0
    r = runner.invoke(app, ["plan", "--data-dir", d, "--agents", "codex,opencode", "--langs", "ko"])
    assert r.exit_code == 0, r.output
    assert "6 issues, 6 with Korean; +12 new" in r.output
    r = runner.invoke(app, ["plan", "--data-dir", d, "--agents", "cursor"])
    assert r.exit_code != 0
    r = runner.invoke(app, ["status", "--data-dir", d])
    assert '"pending": 12' in r.output
    assert json.loads(r.output)["setup_failures"] == {}
    # a session whose repository's environment setup failed (recorded by the sandbox runner, on any host)
    sessions = session_factory(connect(default_url(Path(d))))
    with sessions.begin() as s:
        first = s.scalars(select(Session).order_by(Session.priority)).first()
        first.environment = {"setup": {"status": "failed", "reason": "setup `pip install -e .`: exit code 1"}}
        repo = s.scalar(
            select(Repo.name).join(Issue, Issue.repo_id == Repo.id).where(Issue.id == first.issue_id)
        )
    r = runner.invoke(app, ["status", "--data-dir", d])
    assert json.loads(r.output)["setup_failures"] == {
        repo: {"sessions": 1, "reason": "setup `pip install -e .`: exit code 1"}
    }
    r = runner.invoke(app, ["export", "--data-dir", d])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["push", "--repo-id", "org/x", "--data-dir", d, "--dry-run"])
    assert r.exit_code == 0
    assert "README.md" in r.output
    assert "would upload" in r.output


def test_run_refuses_the_cluster_options_without_ray(tmp_path):
    """`--store-url` and `--upstream` configure the Ray nodes' own proxies: without `--ray` they would be
    silently ignored (the local runner sends agents through --proxy-url's proxy), so `run` refuses them."""
    d = str(tmp_path / "d")
    for extra in (["--store-url", str(tmp_path / "bucket")], ["--upstream", "http://127.0.0.1:9"]):
        r = runner.invoke(app, ["run", "--data-dir", d, "--proxy-url", "http://127.0.0.1:9", *extra])
        assert r.exit_code == 2
        assert "are for --ray" in r.output
    r = runner.invoke(app, ["run", "--help"])
    assert "--upstream-api" in r.output
