"""The Rust, Java, C++ and Node toolchain families in Docker: a tiny project (under projects/), its environment
image built on the family's image (already built: the tests reuse it), its tests run before and after a
scripted fix (the `command` pseudo-agent), and the outcome recorded: a failing test counted at baseline, none
after, `resolved`.

What this machine can reach decides what each project downloads. registry.npmjs.org answers, so the Node
project's dependency comes from npm through the sandbox's squid. crates.io and Maven Central do not answer
from here (`curl https://index.crates.io/config.json`, `https://repo1.maven.org/maven2/` time out), so the
Rust crate has no dependency, and the Java project is a plain `javac` one tested with JUnit 4 from Debian
(installed in the Java family image with Gradle) instead of Maven, whose plugins would come from Central.
The C++ project needs nothing from outside.
"""

from __future__ import annotations

import functools
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandboxes.config import SandboxSettings
from sandboxes.envimage import gc_env_images
from sandboxes.environment import Prepared, prepare
from sandboxes.session import SessionResult, run_session
from tests.sandboxes.conftest import base_commit
from tests.sandboxes.sessions import command_request, patched_files

pytestmark = [pytest.mark.docker, pytest.mark.slow]


PROJECTS = Path(__file__).with_name("projects")  # one tiny project a family, each adding with a minus


@dataclass(frozen=True)
class Project:
    """The family's project under PROJECTS, the fix the `command` agent applies to it, what `prepare` is told."""

    family: str
    language: str
    fix: str
    setup: str | None = None
    test: str | None = None


def _commit(root: Path, family: str) -> tuple[Path, str]:
    repo = root / "project"
    shutil.copytree(PROJECTS / family, repo)
    return repo, base_commit(repo)


def _run(  # type: ignore[no-untyped-def]
    docker_client, agents_image: str, tmp_path: Path, project: Project
) -> tuple[Prepared, SessionResult]:
    """Environment image, then baseline tests → the fix → tests after; the image is removed on the way out."""
    settings = SandboxSettings(
        env_state_dir=tmp_path / "state",
        setup_time_limit_s=300,
        test_time_limit_s=240,
        env_min_free_gb=1,
        egress="none",
    )
    repo, sha = _commit(tmp_path, project.family)
    repo_id = f"test/{project.family}-{uuid.uuid4().hex[:6]}"
    hints = {"setup": project.setup, "test": project.test, "language": project.language}
    prepared = prepare(docker_client, settings, agents_image, repo, sha, repo_id=repo_id, **hints)
    try:
        assert prepared.plan.family == project.family
        assert prepared.setup["status"] == "built", (prepared.setup["reason"], prepared.setup["tail"])
        assert prepared.prepared_base is not None  # the session starts from the image, no copy of the tree
        fields = {"task": "fix add", "time_limit_s": 60, "settings": settings, **prepared.request_fields()}
        result = run_session(command_request((repo, sha), project.fix, **fields), docker_client)
    finally:
        gc_env_images(docker_client, settings.model_copy(update={"env_budget_gb": 1e-6}), repo_id=repo_id)
    assert result.status == "succeeded", result.reason
    assert result.baseline is not None
    assert result.after is not None
    return prepared, result


@pytest.fixture
def run_project(  # type: ignore[no-untyped-def]
    docker_client, agents_image: str, tmp_path: Path
) -> Callable[[Project], tuple[Prepared, SessionResult]]:
    """`_run` for this test's project, on the engine and agents image."""
    return functools.partial(_run, docker_client, agents_image, tmp_path)


def _counts(run: dict[str, object]) -> tuple[object, ...]:
    return run["passed"], run["failed"], run["errors"], run["timed_out"]


def _check_one_fixed(result: SessionResult) -> None:
    """Of the project's two tests one failed at baseline, both pass after the fix: the issue is resolved."""
    assert _counts(result.baseline) == (1, 1, 0, False), result.baseline["tail"]
    assert _counts(result.after) == (2, 0, 0, False), result.after["tail"]
    assert result.resolved is True


RUST = Project("rust", "Rust", fix="sed -i 's/    a - b/    a + b/' src/lib.rs")


def test_rust_crate_detected_setup_and_cargo_test(run_project) -> None:  # type: ignore[no-untyped-def]
    prepared, result = run_project(RUST)
    assert (prepared.plan.setup, prepared.test_command) == ("cargo fetch", "cargo test")
    assert result.baseline["tests"] == {"tests::adds": "failed", "tests::zero": "passed"}, result.baseline[
        "tail"
    ]
    assert result.after["tests"] == {"tests::adds": "passed", "tests::zero": "passed"}, result.after["tail"]
    assert result.resolved is True
    # Cargo's target/ from the baseline run stays out of the patch.
    assert patched_files(result) == ["+++ b/src/lib.rs"]


JUNIT = "/usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar"
JAVA = Project(
    "java",
    "Java",
    fix="sed -i 's/return a - b/return a + b/' src/Calc.java",
    setup="mkdir -p out && javac -d out src/*.java",
    test=f"javac -cp {JUNIT} -d out src/*.java test/*.java && java -cp out:{JUNIT} org.junit.runner.JUnitCore CalcTest",
)


def test_java_javac_project_with_a_test_hint_and_junit(run_project) -> None:  # type: ignore[no-untyped-def]
    prepared, result = run_project(JAVA)
    assert prepared.test_command == JAVA.test
    _check_one_fixed(result)
    assert result.baseline["exit_code"] != 0


CPP = Project("cpp", "C++", fix="sed -i 's/a - b/a + b/' calc.cpp")


def test_cpp_cmake_project_detected_setup_and_ctest(run_project) -> None:  # type: ignore[no-untyped-def]
    prepared, result = run_project(CPP)
    assert prepared.plan.setup == "cmake -S . -B build"
    assert prepared.test_command == "cmake --build build && ctest --test-dir build"
    _check_one_fixed(result)
    assert patched_files(result) == ["+++ b/calc.cpp"]


NODE = Project("node", "JavaScript", fix="sed -i 's/return a - b/return a + b/' index.js")


def test_node_package_installs_from_npm_through_the_proxy(run_project) -> None:  # type: ignore[no-untyped-def]
    prepared, result = run_project(NODE)
    assert (prepared.plan.setup, prepared.test_command) == ("npm install", "npm test")
    npm = [h for h in prepared.setup["egress"] if h["host"] == "registry.npmjs.org"]
    assert npm, prepared.setup["egress"]
    assert all("DENIED" not in h["status"] for h in npm)
    assert sum(h["bytes_in"] for h in npm) > 1000  # the package's metadata and tarball
    _check_one_fixed(result)
    assert patched_files(result) == ["+++ b/index.js"]
