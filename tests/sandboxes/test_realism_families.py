"""The Rust, Java, C++ and Node toolchain families in Docker: a tiny project generated here, its environment
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

import uuid
from pathlib import Path

import pytest

from sandboxes.config import SandboxSettings
from sandboxes.envimage import gc_env_images
from sandboxes.environment import Prepared, prepare
from sandboxes.session import SessionRequest, SessionResult, run_session
from tests.sandboxes.conftest import git

pytestmark = [pytest.mark.docker, pytest.mark.slow]
NO_MODEL = "http://127.0.0.1:9"  # the command agent talks to no model


def _commit(root: Path, files: dict[str, str]) -> tuple[Path, str]:
    repo = root / "project"
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo, git(repo, "rev-parse", "HEAD")


def _run(  # type: ignore[no-untyped-def]
    docker_client,
    agents_image: str,
    tmp_path: Path,
    files: dict[str, str],
    *,
    family: str,
    fix: str,
    language: str,
    setup: str | None = None,
    test: str | None = None,
) -> tuple[Prepared, SessionResult]:
    """Environment image, then baseline tests → the fix → tests after; the image is removed on the way out."""
    settings = SandboxSettings(
        env_state_dir=tmp_path / "state",
        setup_time_limit_s=300,
        test_time_limit_s=240,
        env_min_free_gb=1,
        egress="none",
    )
    repo, sha = _commit(tmp_path, files)
    repo_id = f"test/{family}-{uuid.uuid4().hex[:6]}"
    prepared = prepare(
        docker_client,
        settings,
        agents_image,
        repo,
        sha,
        repo_id=repo_id,
        setup=setup,
        test=test,
        language=language,
    )
    try:
        assert prepared.plan.family == family
        assert prepared.setup["status"] == "built", (prepared.setup["reason"], prepared.setup["tail"])
        assert prepared.prepared_base is not None  # the session starts from the image, no copy of the tree
        req = SessionRequest(
            agent="command",
            repo=repo,
            commit=sha,
            task="fix add",
            proxy_url=NO_MODEL,
            command=fix,
            time_limit_s=60,
            settings=settings,
            **prepared.request_fields(),
        )
        result = run_session(req, docker_client)
    finally:
        gc_env_images(docker_client, settings.model_copy(update={"env_budget_gb": 1e-6}), repo_id=repo_id)
    assert result.status == "succeeded", result.reason
    assert result.baseline is not None
    assert result.after is not None
    return prepared, result


def _counts(run: dict[str, object]) -> tuple[object, ...]:
    return run["passed"], run["failed"], run["errors"], run["timed_out"]


RUST = {
    "Cargo.toml": '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n',
    "src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n#[cfg(test)]\nmod tests {\n"
    "    use super::add;\n\n    #[test]\n    fn adds() {\n        assert_eq!(add(2, 2), 4);\n    }\n\n"
    "    #[test]\n    fn zero() {\n        assert_eq!(add(0, 0), 0);\n    }\n}\n",
}


def test_rust_crate_detected_setup_and_cargo_test(docker_client, agents_image: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prepared, result = _run(
        docker_client,
        agents_image,
        tmp_path,
        RUST,
        family="rust",
        language="Rust",
        fix="sed -i 's/    a - b/    a + b/' src/lib.rs",
    )
    assert (prepared.plan.setup, prepared.test_command) == ("cargo fetch", "cargo test")
    assert result.baseline["tests"] == {"tests::adds": "failed", "tests::zero": "passed"}, result.baseline[
        "tail"
    ]
    assert result.after["tests"] == {"tests::adds": "passed", "tests::zero": "passed"}, result.after["tail"]
    assert result.resolved is True
    # Cargo's target/ from the baseline run stays out of the patch.
    assert [ln for ln in result.patch.splitlines() if ln.startswith("+++ ")] == ["+++ b/src/lib.rs"]


JUNIT = "/usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar"
JAVA = {
    "src/Calc.java": "public class Calc {\n    public static int add(int a, int b) { return a - b; }\n}\n",
    "test/CalcTest.java": "import org.junit.Test;\nimport static org.junit.Assert.assertEquals;\n\n"
    "public class CalcTest {\n    @Test public void adds() { assertEquals(4, Calc.add(2, 2)); }\n"
    "    @Test public void zero() { assertEquals(0, Calc.add(0, 0)); }\n}\n",
}


def test_java_javac_project_with_a_test_hint_and_junit(
    docker_client, agents_image: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    test = f"javac -cp {JUNIT} -d out src/*.java test/*.java && java -cp out:{JUNIT} org.junit.runner.JUnitCore CalcTest"
    prepared, result = _run(
        docker_client,
        agents_image,
        tmp_path,
        JAVA,
        family="java",
        language="Java",
        setup="mkdir -p out && javac -d out src/*.java",
        test=test,
        fix="sed -i 's/return a - b/return a + b/' src/Calc.java",
    )
    assert prepared.test_command == test
    assert _counts(result.baseline) == (1, 1, 0, False), result.baseline["tail"]
    assert result.baseline["exit_code"] != 0
    assert _counts(result.after) == (2, 0, 0, False), result.after["tail"]
    assert result.resolved is True


CPP = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.16)\nproject(calc CXX)\nenable_testing()\n"
    "add_library(calc calc.cpp)\n"
    "foreach(t adds zero)\n  add_executable(test_${t} test_${t}.cpp)\n"
    "  target_link_libraries(test_${t} calc)\n  add_test(NAME ${t} COMMAND test_${t})\nendforeach()\n",
    "calc.cpp": "int add(int a, int b) { return a - b; }\n",
    "test_adds.cpp": "int add(int, int);\nint main() { return add(2, 2) == 4 ? 0 : 1; }\n",
    "test_zero.cpp": "int add(int, int);\nint main() { return add(0, 0) == 0 ? 0 : 1; }\n",
}


def test_cpp_cmake_project_detected_setup_and_ctest(docker_client, agents_image: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prepared, result = _run(
        docker_client,
        agents_image,
        tmp_path,
        CPP,
        family="cpp",
        language="C++",
        fix="sed -i 's/a - b/a + b/' calc.cpp",
    )
    assert prepared.plan.setup == "cmake -S . -B build"
    assert prepared.test_command == "cmake --build build && ctest --test-dir build"
    assert _counts(result.baseline) == (1, 1, 0, False), result.baseline["tail"]
    assert _counts(result.after) == (2, 0, 0, False), result.after["tail"]
    assert result.resolved is True
    assert [ln for ln in result.patch.splitlines() if ln.startswith("+++ ")] == ["+++ b/calc.cpp"]


NODE = {
    "package.json": '{\n  "name": "calc",\n  "version": "0.1.0",\n  "scripts": {"test": "node --test"},\n'
    '  "dependencies": {"is-number": "7.0.0"}\n}\n',
    "index.js": 'const isNumber = require("is-number");\n\n'
    "exports.add = (a, b) => {\n  if (!isNumber(a) || !isNumber(b)) throw new TypeError('numbers only');\n"
    "  return a - b;\n};\n",
    "test/calc.test.js": 'const test = require("node:test");\nconst assert = require("node:assert");\n'
    'const { add } = require("..");\n\ntest("adds", () => assert.strictEqual(add(2, 2), 4));\n'
    "test(\"refuses text\", () => assert.throws(() => add('a', 1), TypeError));\n",
}


def test_node_package_installs_from_npm_through_the_proxy(
    docker_client, agents_image: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    prepared, result = _run(
        docker_client,
        agents_image,
        tmp_path,
        NODE,
        family="node",
        language="JavaScript",
        fix="sed -i 's/return a - b/return a + b/' index.js",
    )
    assert (prepared.plan.setup, prepared.test_command) == ("npm install", "npm test")
    npm = [h for h in prepared.setup["egress"] if h["host"] == "registry.npmjs.org"]
    assert npm, prepared.setup["egress"]
    assert all("DENIED" not in h["status"] for h in npm)
    assert sum(h["bytes_in"] for h in npm) > 1000  # the package's metadata and tarball
    assert _counts(result.baseline) == (1, 1, 0, False), result.baseline["tail"]
    assert _counts(result.after) == (2, 0, 0, False), result.after["tail"]
    assert result.resolved is True
    assert [ln for ln in result.patch.splitlines() if ln.startswith("+++ ")] == ["+++ b/index.js"]
