"""What the trainer's tests share: tiny-qwen3 (the real Qwen3 architecture and tokenizer, tiny weights), agent-
like call records whose completions are its greedy continuations, and a drafter overfit on them (high,
checkable acceptance) — built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from lm import Target, load_target
from tests.trainer.replay.conftest import call_rows, overfit


@pytest.fixture(scope="session")
def tiny() -> Target:
    return load_target("tiny-qwen3")


@pytest.fixture(scope="session")
def rows(tiny: Target) -> list[dict]:  # type: ignore[type-arg]
    return call_rows(tiny, [20, 24, 28, 32])


@pytest.fixture(scope="session")
def drafter_dir(tiny: Target, rows: list[dict], tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[type-arg]
    return overfit(tiny, rows, tmp_path_factory.mktemp("drafter"))
