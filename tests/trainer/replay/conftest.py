"""Two live stand-in servers of tiny-qwen3 (tests/conftest.py): plain, and speculative with the shared
overfit drafter; held-out calls written as an exported split."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lm import Target
from lm.standin.server import TargetServer
from tests.lm.conftest import Live, live
from trainer.dflash.engine import engine_factory


def write_split(rows: list[dict], folder: Path, split: str) -> Path:  # type: ignore[type-arg]
    """Rows as an exported dataset's `calls` config, all in one split."""
    calls = folder / "data" / "calls"
    calls.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), calls / f"{split}-00000-of-00001.parquet")
    return folder


@pytest.fixture(scope="module")
def plain(tiny: Target) -> Iterator[Live]:
    with live(TargetServer(tiny, max_model_len=256)) as server:
        yield server


@pytest.fixture(scope="module")
def spec(tiny: Target, tiny_drafter: Path) -> Iterator[Live]:
    with live(TargetServer(tiny, engine=engine_factory(tiny_drafter)(tiny), max_model_len=256)) as server:
        yield server
