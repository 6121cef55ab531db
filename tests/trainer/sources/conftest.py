from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from lm import Target
from lm.standin.extract import ExtractionSettings, create_app
from tests.lm.conftest import live


@contextlib.contextmanager
def extraction_server(target: Target, aux_layer_ids: list[int], storage: Path) -> Iterator[str]:
    """The stand-in server in extraction mode on 127.0.0.1, launched with these vLLM aux ids."""
    settings = ExtractionSettings(aux_layer_ids=aux_layer_ids, shared_storage_path=storage)
    with live(SimpleNamespace(app=create_app(target, settings, max_model_len=512))) as server:  # type: ignore[arg-type]
        yield server.url
