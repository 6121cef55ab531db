"""A fixture for test packages of tiny models: their conftest imports it (autouse, once per package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def _one_torch_thread() -> Iterator[None]:
    """The tiny models here are overhead-bound: a second intra-op thread only adds barrier waits (and on a
    busy machine a descheduled spinning thread makes each op ~20x slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
