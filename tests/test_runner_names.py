"""The session runners' names have one owner, `factory.run.runner_types` (`RunnerName`, `SANDBOX`, `FAKE`):
no other module of the project spells one. The Ray resource a node offers per sandbox is also called
"sandbox"; it is named once too (`ray_runner.SANDBOX_RESOURCE`), and a sandbox container's hostname is
"sandbox": those two are the only other spellings allowed."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

from factory.run.runner_types import FAKE, REHEARSAL, SANDBOX, RunnerName
from factory.run.runners import RUNNERS
from tests.support import REPO_ROOT
from tests.support.literals import scan, spelled

OWNER = REPO_ROOT / "factory" / "run" / "runner_types.py"
NAMES = set(typing.get_args(RunnerName))


def other_meaning(parent: ast.AST, const: ast.Constant) -> bool:
    """The value of `SANDBOX_RESOURCE = ...`, or of a `hostname=` keyword."""
    if isinstance(parent, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "SANDBOX_RESOURCE" for t in parent.targets)
    return isinstance(parent, ast.keyword) and parent.arg == "hostname"


def test_no_module_but_the_owner_spells_a_runner_name() -> None:
    found = scan(NAMES, {OWNER}, allowed=other_meaning)
    assert found == [], "runner names belong to factory.run.runner_types:\n" + "\n".join(found)


def test_the_scan_finds_a_spelled_name(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('RUNNER = "fake"\nOTHER = "faker"\nSANDBOX_RESOURCE = "sandbox"\n')
    assert spelled(probe, NAMES, tmp_path, other_meaning) == ["probe.py:1 'fake'"]


def test_every_name_has_a_runner() -> None:
    assert set(RUNNERS) == NAMES == {SANDBOX, FAKE, REHEARSAL}
