"""The session runners' names have one owner, `factory.run.runner_types` (`RunnerName`, `SANDBOX`, `FAKE`):
no other module of the project spells one. The Ray resource a node offers per sandbox is also called
"sandbox"; it is named once too (`ray_runner.SANDBOX_RESOURCE`) and is the one other assignment allowed."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

from factory.run.runner_types import FAKE, SANDBOX, RunnerName
from factory.run.runners import RUNNERS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("factory", "sandboxes", "trainer", "proxy", "benchmarks")
OWNER = ROOT / "factory" / "run" / "runner_types.py"
NAMES = set(typing.get_args(RunnerName))
# Not runner names, though spelled alike: the Ray resource (named once) and the sandbox container's hostname.
ALLOWED = {"factory/run/ray_runner.py:SANDBOX_RESOURCE", "sandboxes/sandbox.py:hostname"}


def spelled(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(root).as_posix()
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and f"{rel}:{t.id}" in ALLOWED for t in node.targets
        ):
            allowed.add(id(node.value))
        if isinstance(node, ast.keyword) and f"{rel}:{node.arg}" in ALLOWED:
            allowed.add(id(node.value))
    return [
        f"{rel}:{node.lineno} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in allowed
    ]


def test_no_module_but_the_owner_spells_a_runner_name() -> None:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 100
    found = [hit for p in files if p != OWNER for hit in spelled(p)]
    assert found == [], "runner names belong to factory.run.runner_types:\n" + "\n".join(found)


def test_the_scan_finds_a_spelled_name(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('RUNNER = "fake"\nOTHER = "faker"\n')
    assert spelled(probe, tmp_path) == ["probe.py:1 'fake'"]


def test_every_name_has_a_runner() -> None:
    assert set(RUNNERS) == NAMES == {SANDBOX, FAKE}
