from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest
import uvicorn

from lm import Target
from lm.standin.server import TargetServer
from tests.support import free_port


@dataclass
class Live:
    server: TargetServer
    url: str

    @property
    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, timeout=300)


@contextlib.contextmanager
def live(server: TargetServer) -> Iterator[Live]:
    """Serve `server.app` with uvicorn on a thread (its own event loop) for the block."""
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(server.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not uv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield Live(server, f"http://127.0.0.1:{port}")
    finally:
        uv.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def tiny_live(tiny: Target) -> Iterator[Live]:
    with live(TargetServer(tiny, max_model_len=512)) as server:
        yield server
