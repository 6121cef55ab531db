"""A repository's tests run inside the sandbox, before the agent (baseline) and after its patch.

The outcome is read from the runner's own output: per-test verdicts where the runner prints them (pytest
`-rA`, unittest `-v`, `go test -v`, `cargo test`), else its summary line (jest, Maven Surefire, JUnit 4's
JUnitCore, CTest, `node --test`).
`resolved` compares the two runs test by test when names are known, else by counts.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

TAIL_CHARS = 4000

# Runners that name each test: (pattern, group of the name, group of the verdict word).
_PER_TEST = (
    (re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) ([^\s(]\S*)", re.M), 2, 1),  # pytest -rA
    (re.compile(r"^\s*--- (PASS|FAIL|SKIP): (\S+)", re.M), 2, 1),  # go test -v
    (re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)$", re.M), 1, 2),  # cargo test
    (re.compile(r"^\w+ \(([\w.]+)\)(?:\n.*?)? \.\.\. (ok|FAIL|ERROR|skipped)", re.M), 1, 2),  # unittest -v
)
_VERDICT = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "skipped",
    "ok": "passed",
    "FAIL": "failed",
    "ignored": "skipped",
    "XPASS": "passed",
    "PASS": "passed",
    "SKIP": "skipped",
    "skipped": "skipped",
}
_PYTEST_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped)")
_SUMMARIES = (
    # jest: "Tests:       1 failed, 2 passed, 3 total"
    (re.compile(r"^Tests:\s+(.*total)$", re.M), re.compile(r"(\d+) (passed|failed)")),
)
_SUREFIRE = re.compile(r"Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+)")
# JUnitCore (a plain javac project): "Tests run: 2,  Failures: 1" after failures, "OK (2 tests)" without.
_JUNIT4_FAILED = re.compile(r"^Tests run: (\d+),\s+Failures: (\d+)\s*$", re.M)
_JUNIT4_OK = re.compile(r"^OK \((\d+) tests?\)\s*$", re.M)
# node --test: "# tests 2 … # pass 1 # fail 1" (TAP reporter, off a terminal) or "ℹ pass 1" (spec reporter).
_NODE_TOTAL = re.compile(r"^[#ℹ] tests \d+$", re.M)
_NODE_COUNT = re.compile(r"^[#ℹ] (pass|fail|skipped) (\d+)$", re.M)
_CTEST = re.compile(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests?", re.M)
_UNITTEST_FAILED = re.compile(r"^FAILED \(([^)]*)\)", re.M)


@dataclass
class TestOutcome:
    """One run of the repository's test command."""

    __test__ = False  # not a pytest class

    command: str
    exit_code: int | None
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    timed_out: bool = False
    seconds: float = 0.0
    tail: str = ""
    tests: dict[str, str] = field(default_factory=dict)  # test name → verdict, where the runner names them

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def reason(self) -> str | None:
        if self.timed_out:
            return "timeout: the test command passed its time limit"
        return None


def per_test(output: str) -> dict[str, str]:
    tests: dict[str, str] = {}
    for pattern, name, word in _PER_TEST:
        for m in pattern.finditer(output):
            tests[m.group(name)] = _VERDICT.get(m.group(word), "failed")
    return tests


def parse(command: str, exit_code: int | None, output: str) -> TestOutcome:
    """Counts (and per-test verdicts where printed) from a test runner's output."""
    out = TestOutcome(command, exit_code, tail=output[-TAIL_CHARS:])
    out.tests = per_test(output)
    if out.tests:
        verdicts = list(out.tests.values())
        out.passed, out.failed = verdicts.count("passed"), verdicts.count("failed")
        out.errors, out.skipped = verdicts.count("error"), verdicts.count("skipped")
        return out
    lines = [ln for ln in output.splitlines() if ln.startswith("=") and " in " in ln]
    if lines:  # pytest without -rA: its last "=== 1 failed, 2 passed in 0.1s ===" line
        for n, word in _PYTEST_SUMMARY.findall(lines[-1]):
            key = "errors" if word.startswith("error") else word
            setattr(out, key, int(n))
        return out
    if m := list(_SUREFIRE.finditer(output)):
        run, failures, errors, skipped = (int(x) for x in m[-1].groups())
        out.failed, out.errors, out.skipped = failures, errors, skipped
        out.passed = run - failures - errors - skipped
        return out
    if junit := _junit4(output):
        out.passed, out.failed = junit
        return out
    if _NODE_TOTAL.search(output):
        counts = {word: int(n) for word, n in _NODE_COUNT.findall(output)}
        out.passed, out.failed, out.skipped = (
            counts.get("pass", 0),
            counts.get("fail", 0),
            counts.get("skipped", 0),
        )
        return out
    if m2 := _CTEST.search(output):
        failed, total = int(m2.group(2)), int(m2.group(3))
        out.failed, out.passed = failed, total - failed
        return out
    if ran := _UNITTEST_RAN.search(output):
        counts = dict(
            kv.split("=") for kv in (_UNITTEST_FAILED.findall(output) or [""])[-1].split(", ") if "=" in kv
        )
        out.failed, out.errors = int(counts.get("failures", 0)), int(counts.get("errors", 0))
        out.skipped = int(counts.get("skipped", 0))
        out.passed = int(ran.group(1)) - out.failed - out.errors - out.skipped
        return out
    for head, pairs in _SUMMARIES:
        if h := head.search(output):
            for n, word in pairs.findall(h.group(1)):
                setattr(out, word, int(n))
    return out


def _junit4(output: str) -> tuple[int, int] | None:
    """(passed, failed) from JUnitCore's last summary line, None when it printed none."""
    failed = list(_JUNIT4_FAILED.finditer(output))
    ok = list(_JUNIT4_OK.finditer(output))
    if failed and (not ok or failed[-1].start() > ok[-1].start()):
        run, failures = int(failed[-1].group(1)), int(failed[-1].group(2))
        return run - failures, failures
    if ok:
        return int(ok[-1].group(1)), 0
    return None


def resolved(baseline: TestOutcome | None, after: TestOutcome | None) -> bool | None:
    """True when the patch makes tests pass that failed before and breaks none that passed (None: unknown)."""
    if baseline is None or after is None or baseline.timed_out:
        return None
    if after.timed_out:
        return False
    bad = ("failed", "error")
    if baseline.tests and after.tests:
        fixed = [t for t, v in baseline.tests.items() if v in bad and after.tests.get(t) == "passed"]
        broken = [t for t, v in baseline.tests.items() if v == "passed" and after.tests.get(t) in bad]
        return bool(fixed) and not broken
    if not any((baseline.passed, baseline.failed, baseline.errors, after.passed, after.failed, after.errors)):
        # A runner that prints no counts at all (a plain `node test/test.js`): its exit status says it.
        return baseline.exit_code not in (0, None) and after.exit_code == 0
    return baseline.failed + baseline.errors > 0 and after.failed + after.errors == 0 and after.exit_code == 0
