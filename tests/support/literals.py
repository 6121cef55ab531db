"""Finding where a project's modules spell a name as a string constant: the scan behind the tests that keep
each set of names (agents, APIs, runners) in its one owner module."""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection
from pathlib import Path

from tests.support import REPO_ROOT

# Every package and the benchmarks; tests keep their literals (they are the data recorded rows hold).
PACKAGES = (
    "clikit",
    "records",
    "wire",
    "standin",
    "serving",
    "sandboxes",
    "proxy",
    "trainer",
    "factory",
    "benchmarks",
)


def spelled(
    path: Path,
    names: Collection[str],
    root: Path = REPO_ROOT,
    allowed: Callable[[ast.AST, ast.Constant], bool] = lambda parent, const: False,
) -> list[str]:
    """`file:line 'name'` for each string constant in `path` that is one of `names`; `allowed(parent,
    constant)` exempts a constant by where it stands (e.g. the value of one named assignment)."""
    tree = ast.parse(path.read_text(), str(path))
    exempt = {
        id(child)
        for parent in ast.walk(tree)
        for child in ast.iter_child_nodes(parent)
        if isinstance(child, ast.Constant) and allowed(parent, child)
    }
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in exempt
    ]


def scan(
    names: Collection[str], skip: Collection[Path], **kw: Callable[[ast.AST, ast.Constant], bool]
) -> list[str]:
    """Every spelling of `names` in the project's modules but `skip` (the owner, and files where the same
    spelling means something else)."""
    files = [p for pkg in PACKAGES for p in sorted((REPO_ROOT / pkg).rglob("*.py"))]
    assert len(files) > 100  # the scan saw the project, not an empty folder
    return [hit for p in files if p not in skip for hit in spelled(p, names, **kw)]
