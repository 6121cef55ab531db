"""What a repository needs, read from the files of its base commit: language family, setup and test commands.

`repos.yaml`'s `setup:`/`test:` hints win; otherwise the build files decide (the first match in `RULES`).
The lockfile hash keys the environment image together with the commit, so a changed lockfile never reuses
an environment installed from the old one.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

# (family, marker files, setup, test): the first family whose marker is at the top of the tree wins.
RULES: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    (
        "python",
        ("pyproject.toml", "setup.py", "setup.cfg"),
        "pip install -e '.[test]' || pip install -e '.[tests]' || pip install -e .",
        "python -m pytest -rA -p no:cacheprovider",
    ),
    (
        "python",
        ("requirements.txt",),
        "pip install -r requirements.txt",
        "python -m pytest -rA -p no:cacheprovider",
    ),
    ("go", ("go.mod",), "go mod download", "go test -v ./..."),
    ("rust", ("Cargo.toml",), "cargo fetch", "cargo test"),
    ("node", ("pnpm-lock.yaml",), "pnpm install --frozen-lockfile", "pnpm test"),
    ("node", ("yarn.lock",), "yarn install --frozen-lockfile", "yarn test"),
    ("node", ("package-lock.json",), "npm ci", "npm test"),
    ("node", ("package.json",), "npm install", "npm test"),
    ("java", ("pom.xml",), "mvn -B -q dependency:go-offline", "mvn -B test"),
    (
        "java",
        ("build.gradle", "build.gradle.kts"),
        "gradle --no-daemon dependencies",
        "gradle --no-daemon test",
    ),
    ("cpp", ("CMakeLists.txt",), "cmake -S . -B build", "cmake --build build && ctest --test-dir build"),
    ("cpp", ("Makefile",), "", "make test"),
)
LOCKFILES = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "poetry.lock",
    "uv.lock",
    "Pipfile.lock",
    "go.mod",
    "go.sum",
    "Cargo.toml",
    "Cargo.lock",
    "package.json",
    "package-lock.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
)
LANGUAGE_FAMILY = {
    "python": "python",
    "go": "go",
    "rust": "rust",
    "javascript": "node",
    "typescript": "node",
    "java": "java",
    "kotlin": "java",
    "c": "cpp",
    "c++": "cpp",
}


@dataclass(frozen=True)
class Plan:
    """How to prepare and test one repository at one commit."""

    family: str
    setup: str
    test: str
    lock_hash: str


def top_level(repo: Path, commit: str) -> dict[str, str]:
    """Top-level file names of `commit` → blob id (no checkout needed)."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    files = {}
    for line in out.splitlines():
        meta, _, name = line.partition("\t")
        files[name] = meta.split()[2]
    return files


def plan_for(
    repo: Path,
    commit: str,
    *,
    setup: str | None = None,
    test: str | None = None,
    language: str | None = None,
) -> Plan:
    files = top_level(repo, commit)
    names = set(files)
    if any(n.startswith("requirements") and n.endswith(".txt") for n in names):
        names.add("requirements.txt")
    rule = next((r for r in RULES if names & set(r[1])), None)
    family = rule[0] if rule else LANGUAGE_FAMILY.get((language or "").lower(), "python")
    if rule and language and LANGUAGE_FAMILY.get(language.lower()) not in (None, family):
        # The registry's language wins over a stray build file (a Go repo with a docs requirements.txt).
        alt = next(
            (r for r in RULES if r[0] == LANGUAGE_FAMILY[language.lower()] and names & set(r[1])), None
        )
        family, rule = LANGUAGE_FAMILY[language.lower()], alt
    locks = sorted((n, files[n]) for n in LOCKFILES if n in files)
    return Plan(
        family=family,
        setup=setup if setup is not None else (rule[2] if rule else ""),
        test=test if test is not None else (rule[3] if rule else ""),
        lock_hash=hashlib.sha256(repr(locks).encode()).hexdigest()[:12],
    )


# A `setup:` hint of repos.yaml often ends in the repository's test command ("npm install && npm test",
# "go test ./...", "python3 -m unittest discover -s tests"): those steps are its tests, not its setup.
_TEST_STEP = re.compile(
    r"^(python3? -m (pytest|unittest)|pytest|tox|nox|go test|cargo test|(npm|yarn|pnpm)( run)? test|mvn( -\S+)* test"
    r"|gradle( -\S+)* test|\./gradlew( -\S+)* test|ctest|make (test|check)|node \S*tests?[/.]\S*)\b"
)


def split_hint(hint: str | None) -> tuple[str | None, str | None]:
    """(setup, test) from a `setup:` hint: its trailing test steps become the test command."""
    if not hint:
        return None, None
    steps = [s.strip() for s in hint.split("&&")]
    first_test = next((i for i, s in enumerate(steps) if _TEST_STEP.match(s)), len(steps))
    setup, test = " && ".join(steps[:first_test]), " && ".join(steps[first_test:])
    return setup or None, test or None
