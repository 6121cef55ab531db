"""One torch thread per test; the tiny 4-layer target and its call records, which the drafter kinds'
tests (DSpark, DFlash2) train and decode with, made once per module."""

from pathlib import Path

import pytest

from lm.model import Target
from tests.trainer.dflash.tiny import tiny_target, write_calls
from tests.trainer.one_thread import _one_torch_thread

__all__ = ["_one_torch_thread", "calls", "target"]


@pytest.fixture(scope="module")
def target() -> Target:
    return tiny_target(layers=4)


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory, target: Target) -> Path:
    return write_calls(
        target, tmp_path_factory.mktemp("calls") / "calls.parquet", sessions=5, calls=2, new_tokens=20
    )
