"""One exception base per package, and no two exceptions of the project with one name: a caller catches a
package's own errors by its base, and a traceback's class name says which package raised it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections import Counter
from pathlib import Path

import pytest

from clikit.errors import ClikitError
from factory.errors import FactoryError
from lm.errors import LmError
from proxy.errors import ProxyError
from records.errors import RecordsError
from sandboxes.errors import SandboxError
from serving.errors import ServingError
from trainer.errors import TrainerError
from wire.errors import WireError

BASES: dict[str, type[Exception]] = {
    "clikit": ClikitError,
    "wire": WireError,
    "records": RecordsError,
    "lm": LmError,
    "serving": ServingError,
    "sandboxes": SandboxError,
    "proxy": ProxyError,
    "trainer": TrainerError,
    "factory": FactoryError,
}


def raised_here(package: str) -> list[type[BaseException]]:
    """The exception classes defined in `package`'s modules (not the ones they import)."""
    root = importlib.import_module(package)
    found = []
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        if ".migrations." in info.name or info.name.endswith("__main__"):  # alembic scripts; CLIs that run
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == info.name:
                found.append(cls)
    return found


@pytest.mark.parametrize("package", sorted(BASES))
def test_every_exception_of_a_package_derives_from_its_base(package: str) -> None:
    classes = raised_here(package)
    strays = [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, BASES[package])]
    assert strays == []


def test_no_two_exceptions_share_a_name() -> None:
    names = Counter(c.__name__ for package in BASES for c in raised_here(package))
    assert [n for n, k in names.items() if k > 1] == []


@pytest.mark.parametrize("package", ["sandboxes", "wire", "clikit"])
def test_no_bare_builtin_error_is_raised_where_a_package_has_its_own(package: str) -> None:
    """A user meets these errors: each is the package's own (beside the builtin type, for old callers)."""
    root = Path(__file__).resolve().parents[1] / package
    bare = re.compile(r"raise (RuntimeError|ValueError|TypeError|KeyError)\(")
    found = [
        f"{path.relative_to(root.parent)}:{n}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert found == []
