"""Realism without an engine: test output parsing, `resolved`, build-file detection, the squid policy text,
its access-log parsing and the toolchain Dockerfiles."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sandboxes import testrun
from sandboxes.detect import plan_for, split_hint
from sandboxes.egress import REGISTRIES, parse_log, squid_conf
from sandboxes.families import FAMILIES, dockerfile, family_for, family_tag
from tests.sandboxes.conftest import base_commit, git

PYTEST_RA = """\
tests/test_calc.py .F                                                    [100%]
=================================== FAILURES ===================================
___________________________________ test_add ___________________________________
    def test_add():
>       assert add(2, 2) == 4
E       assert 0 == 4
=========================== short test summary info ============================
PASSED tests/test_calc.py::test_six
FAILED tests/test_calc.py::test_add - assert 0 == 4
ERROR tests/test_other.py::test_db - RuntimeError: no db
========================= 1 failed, 1 passed, 1 error in 0.05s =========================
"""
GO_V = """\
=== RUN   TestGreet
--- FAIL: TestGreet (0.00s)
    greet_test.go:9: got "hi", want "hello"
=== RUN   TestName
--- PASS: TestName (0.00s)
FAIL
FAIL\tdflash.test/app\t0.004s
"""
CARGO = """\
running 2 tests
test tests::adds ... ok
test tests::subtracts ... FAILED

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
"""
UNITTEST_V = """\
test_mean (tests.test_stats.TestStats.test_mean) ... ok
test_median (tests.test_stats.TestStats.test_median)
Median of an even count. ... FAIL
test_parse (tests.test_cli.TestCli.test_parse) ... ERROR

Ran 3 tests in 0.002s

FAILED (failures=1, errors=1)
"""
UNITTEST_QUIET = "...F.\n----\nRan 5 tests in 0.01s\n\nFAILED (failures=1)\n"
SUREFIRE = "[INFO] Results:\n[ERROR] Tests run: 7, Failures: 2, Errors: 1, Skipped: 1\n[INFO] BUILD FAILURE\n"
JEST = "Tests:       1 failed, 4 passed, 5 total\nSnapshots:   0 total\n"
CTEST = "67% tests passed, 1 tests failed out of 3\n"
PYTEST_PLAIN = "..F\n======= 1 failed, 2 passed in 0.10s =======\n"
# JUnit 4's JUnitCore and node --test, as printed by the Java and Node family images (Debian's junit4 4.13.2,
# Node 18.20's TAP reporter off a terminal).
JUNIT4_FAILED = "JUnit version 4.13.2\n.E.\nThere was 1 failure:\n1) adds(CalcTest)\n\nFAILURES!!!\nTests run: 2,  Failures: 1\n\n"
JUNIT4_OK = "JUnit version 4.13.2\n..\nTime: 0.01\n\nOK (2 tests)\n\n"
NODE_TAP = "not ok 1 - adds\nok 2 - other\n1..2\n# tests 2\n# suites 0\n# pass 1\n# fail 1\n# skipped 0\n"
NODE_SPEC = "✖ adds (1ms)\n✔ other (0.2ms)\nℹ tests 3\nℹ pass 2\nℹ fail 0\nℹ skipped 1\n"


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        (PYTEST_RA, (1, 1, 1, 0)),
        (GO_V, (1, 1, 0, 0)),
        (CARGO, (1, 1, 0, 0)),
        (UNITTEST_V, (1, 1, 1, 0)),
        (UNITTEST_QUIET, (4, 1, 0, 0)),
        (SUREFIRE, (3, 2, 1, 1)),
        (JEST, (4, 1, 0, 0)),
        (CTEST, (2, 1, 0, 0)),
        (PYTEST_PLAIN, (2, 1, 0, 0)),
        (JUNIT4_FAILED, (1, 1, 0, 0)),
        (JUNIT4_OK, (2, 0, 0, 0)),
        (NODE_TAP, (1, 1, 0, 0)),
        (NODE_SPEC, (2, 0, 0, 1)),
        ("bash: pytest: command not found\n", (0, 0, 0, 0)),
    ],
)
def test_counts_from_each_runner(output: str, counts: tuple[int, int, int, int]) -> None:
    out = testrun.parse("cmd", 1, output)
    assert (out.passed, out.failed, out.errors, out.skipped) == counts


def test_per_test_verdicts_are_named() -> None:
    assert testrun.parse("pytest", 1, PYTEST_RA).tests == {
        "tests/test_calc.py::test_six": "passed",
        "tests/test_calc.py::test_add": "failed",
        "tests/test_other.py::test_db": "error",
    }
    assert testrun.parse("go", 1, GO_V).tests == {"TestGreet": "failed", "TestName": "passed"}
    assert (
        testrun.parse("unittest", 1, UNITTEST_V).tests["tests.test_stats.TestStats.test_median"] == "failed"
    )


def test_tail_keeps_the_end() -> None:
    out = testrun.parse("cmd", 0, "x" * 10_000 + "THE END")
    assert out.tail.endswith("THE END")
    assert len(out.tail) == testrun.TAIL_CHARS


def _outcome(tests: dict[str, str], code: int = 1, timed_out: bool = False) -> testrun.TestOutcome:
    out = testrun.TestOutcome("t", code, tests=tests, timed_out=timed_out)
    out.failed = list(tests.values()).count("failed")
    return out


def test_resolved_by_test_names() -> None:
    before = _outcome({"a": "failed", "b": "passed"})
    assert testrun.resolved(before, _outcome({"a": "passed", "b": "passed"}, 0)) is True
    # Fixing one test while breaking another is not a resolution; nor is changing nothing.
    assert testrun.resolved(before, _outcome({"a": "passed", "b": "failed"})) is False
    assert testrun.resolved(before, _outcome({"a": "failed", "b": "passed"})) is False
    assert testrun.resolved(before, _outcome({}, timed_out=True)) is False
    assert testrun.resolved(None, before) is None
    assert testrun.resolved(_outcome({}, timed_out=True), before) is None


def test_resolved_by_counts_when_names_are_unknown() -> None:
    before = testrun.parse("unittest", 1, UNITTEST_QUIET)
    assert testrun.resolved(before, testrun.parse("unittest", 0, "Ran 5 tests in 0.01s\n\nOK\n")) is True
    assert testrun.resolved(before, testrun.parse("unittest", 1, UNITTEST_QUIET)) is False
    # No counts at all: the exit status decides.
    assert (
        testrun.resolved(testrun.parse("node t.js", 1, "boom\n"), testrun.parse("node t.js", 0, "ok\n"))
        is True
    )
    assert (
        testrun.resolved(testrun.parse("node t.js", 0, "ok\n"), testrun.parse("node t.js", 0, "ok\n"))
        is False
    )


def _repo(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    path = tmp_path / "r"
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path, base_commit(path)


def test_plan_detects_family_setup_and_test(tmp_path: Path) -> None:
    repo, sha = _repo(tmp_path, {"go.mod": "module x\n", "go.sum": "", "main.go": "package main\n"})
    plan = plan_for(repo, sha)
    assert (plan.family, plan.setup, plan.test) == ("go", "go mod download", "go test -v ./...")
    hinted = plan_for(repo, sha, setup="make deps", test="make check")
    assert (hinted.setup, hinted.test) == ("make deps", "make check")


def test_plan_follows_the_registry_language_over_a_stray_file(tmp_path: Path) -> None:
    repo, sha = _repo(tmp_path, {"requirements.txt": "sphinx\n", "Cargo.toml": "[package]\n"})
    assert plan_for(repo, sha).family == "python"
    assert plan_for(repo, sha, language="Rust").family == "rust"
    assert plan_for(repo, sha, language="Rust").setup == "cargo fetch"


def test_lock_hash_follows_the_lockfiles_only(tmp_path: Path) -> None:
    repo, sha = _repo(tmp_path, {"pyproject.toml": "[project]\nname='x'\n", "a.py": "1\n"})
    first = plan_for(repo, sha).lock_hash
    (repo / "a.py").write_text("2\n")
    git(repo, "commit", "-qam", "code")
    assert plan_for(repo, "HEAD").lock_hash == first
    (repo / "pyproject.toml").write_text("[project]\nname='y'\n")
    git(repo, "commit", "-qam", "deps")
    assert plan_for(repo, "HEAD").lock_hash != first


def test_squid_policy_order() -> None:
    conf = squid_conf(["mirror.internal", "goproxy.internal:8000"]).splitlines()
    access = [line for line in conf if line.startswith("http_access")]
    # The site's mirror (on its own ports) before the port and private-address refusals, the registries
    # after them, and nothing else.
    assert access == [
        "http_access allow extra extra_ports",
        "http_access deny !Safe_ports",
        "http_access deny CONNECT !SSL_ports",
        "http_access deny private",
        "http_access allow registries",
        "http_access deny all",
    ]
    assert "acl extra dstdomain goproxy.internal mirror.internal" in conf
    assert "acl extra_ports port 80 443 8000" in conf
    registries = next(line for line in conf if line.startswith("acl registries")).split()[3:]
    assert set(registries) == set(REGISTRIES)
    assert "pypi.org" in registries
    assert "allow extra" not in squid_conf([])


def test_access_log_lines() -> None:
    hits = parse_log(
        "1764600000.123 TCP_TUNNEL/200 CONNECT pypi.org:443 517 48213\n"
        "1764600001.000 TCP_DENIED/403 CONNECT example.com:443 220 3920\n"
        "1764600002.500 TCP_MISS/200 GET http://deb.debian.org/debian/dists/x 300 1200\n"
        "garbage line\n"
    )
    assert [(h.host, h.allowed, h.bytes_in, h.bytes_out) for h in hits] == [
        ("pypi.org", True, 48213, 517),
        ("example.com", False, 3920, 220),
        ("deb.debian.org", True, 1200, 300),
    ]


def test_family_images_differ_and_go_uses_backports() -> None:
    tags = {family_tag("agents:1", f) for f in FAMILIES.values()}
    assert len(tags) == len(FAMILIES)
    go = dockerfile(FAMILIES["go"])
    assert "-backports" in go
    assert "golang-go" in go
    assert "GOTOOLCHAIN" in go
    assert "python3 -m venv --system-site-packages /opt/venv" in dockerfile(FAMILIES["python"])
    # The Dockerfile is the tag's input: a changed package list gives a new tag.
    assert family_tag("agents:1", FAMILIES["cpp"]) != family_tag("agents:2", FAMILIES["cpp"])


def test_trixie_families_take_go_from_the_suite_and_openjdk_21() -> None:
    """Debian 13: golang-go 1.24 is in trixie itself, OpenJDK 17 is gone (names checked with apt-cache there)."""
    go = dockerfile(family_for("go", "trixie"))
    assert "backports" not in go
    assert "golang-go" in go
    assert "GOTOOLCHAIN" in go
    java = family_for("java", "trixie")
    assert "openjdk-21-jdk-headless" in java.packages
    assert java.env["JAVA_HOME"].endswith("java-21-openjdk-amd64")
    for same in ("python", "node", "rust", "cpp"):
        assert family_for(same, "trixie") == FAMILIES[same]
    # bookworm's (and an unknown suite's) families are the ones whose images already exist: same tags.
    assert all(family_for(name, "bookworm") is FAMILIES[name] for name in FAMILIES)
    assert family_for("go", "sid") is FAMILIES["go"]
    assert family_tag("agents:1", family_for("go", "trixie")) != family_tag("agents:1", FAMILIES["go"])
    with pytest.raises(ValueError, match="unknown language family 'cobol'"):
        family_for("cobol", "trixie")


def test_unknown_git_revision_is_a_clear_error(tmp_path: Path) -> None:
    repo, _ = _repo(tmp_path, {"a": "1"})
    with pytest.raises(subprocess.CalledProcessError):
        plan_for(repo, "no-such-rev")


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        ("pip install -e '.[socks]' pytest", ("pip install -e '.[socks]' pytest", None)),
        ("npm install && npm test", ("npm install", "npm test")),
        ("go test ./...", (None, "go test ./...")),
        ("node test/test.js", (None, "node test/test.js")),
        ("cargo test --lib", (None, "cargo test --lib")),
        ("python3 -m unittest discover -s tests", (None, "python3 -m unittest discover -s tests")),
        (
            "pip install -e . && cd tests && python runtests.py --help",
            ("pip install -e . && cd tests && python runtests.py --help", None),
        ),
        (None, (None, None)),
    ],
)
def test_setup_hint_split_into_setup_and_tests(
    hint: str | None, expected: tuple[str | None, str | None]
) -> None:
    assert split_hint(hint) == expected
