"""The single-host path needs nothing of Ray: without `--ray`, no module of the project imports it."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO_ROOT

CODE = """
import sys
import factory.cli, factory.harvest, factory.run.runners, factory.publish.export, proxy.uploader, records.io
from typer.testing import CliRunner
CliRunner().invoke(factory.cli.app, ["run", "--help"])
CliRunner().invoke(factory.cli.app, ["harvest", "--help"])
print(sorted(m for m in sys.modules if m == "ray" or m.startswith(("ray.", "s3fs"))))
"""


def test_nothing_of_ray_or_s3fs_is_imported_without_ray() -> None:
    r = subprocess.run(
        [sys.executable, "-c", CODE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_run_with_ray_names_the_missing_option() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "factory", "run", "--ray", "127.0.0.1:1", "--upstream", "http://127.0.0.1:9"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert "--store-url" in r.stderr
