"""An OpenAI-compatible server on an in-process target, shaped like vLLM's (docs/vllm-api.md).

Endpoints: /v1/chat/completions, /v1/completions (stream and not), /v1/models, /tokenize, /detokenize,
/health, /version, /metrics. Prompts are rendered by `Target.render`, so `prompt_token_ids` are exactly
what the trainer renders for the same conversation. Model work happens on the scheduler's worker thread;
the event loop only parses, renders (in a thread) and streams.

The parts: `protocol.py` (request bodies, errors, vLLM's checks), `frontend.py` (tokenizer side and its
routes), `generation.py` (the two generation routes, streamed and not), `metrics.py`, `scheduler.py`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Unpack

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from lm.engine import Autoregressive, Engine
from lm.model import Target
from lm.prefix import PrefixCache
from lm.standin.frontend import Frontend, FrontendOptions
from lm.standin.generation import Generation
from lm.standin.metrics import ServerMetrics
from lm.standin.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    OpenAIError,
    TokenizeRequest,
)
from lm.standin.scheduler import Scheduler

log = logging.getLogger(__name__)

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "DetokenizeRequest",
    "OpenAIError",
    "TargetServer",
    "TokenizeRequest",
    "create_app",
    "serve",
]


class TargetServer:
    """The FastAPI app (`.app`) around one target, its engine and scheduler."""

    def __init__(
        self,
        target: Target,
        *,
        engine: Engine | None = None,
        max_num_seqs: int = 4,
        **frontend: Unpack[FrontendOptions],
    ) -> None:
        self.target = target
        self.engine = engine or Engine(target)
        self.frontend = Frontend(target, **frontend)
        self.max_model_len = self.frontend.max_model_len
        self.model_name = self.frontend.model_name
        self.max_tokens_cap = self.frontend.max_tokens_cap
        self.scheduler = Scheduler(self.engine, max_running=max_num_seqs)
        self.metrics = ServerMetrics(self.model_name, self.scheduler, self.engine.strategy)
        self.scheduler.on_start = self.metrics.queue_time.labels(self.model_name).observe
        self.generation = Generation(self.frontend, self.scheduler, self.metrics)
        self.app = self._build_app()

    def _build_app(self) -> FastAPI:
        @contextlib.asynccontextmanager
        async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
            self.scheduler.start()
            try:
                yield
            finally:
                self.scheduler.stop()

        app = FastAPI(title="dflash-factory target", lifespan=lifespan)

        @app.exception_handler(OpenAIError)
        async def _openai_error(_r: Request, e: OpenAIError) -> JSONResponse:
            return JSONResponse(e.body(), status_code=e.status)

        @app.exception_handler(RequestValidationError)
        async def _invalid(_r: Request, e: RequestValidationError) -> JSONResponse:
            return JSONResponse(OpenAIError(400, str(e.errors())).body(), status_code=400)

        app.post("/v1/chat/completions", response_model=None)(self.generation.chat_completions)
        app.post("/v1/completions", response_model=None)(self.generation.completions)
        app.get("/v1/models")(self.frontend.models)
        app.post("/tokenize")(self.frontend.tokenize)
        app.post("/detokenize")(self.frontend.detokenize)
        app.get("/health")(self.health)
        app.get("/version")(self.version)
        app.get("/metrics")(self.prometheus)
        return app

    async def health(self) -> Response:
        return Response(status_code=200)

    async def version(self) -> dict[str, str]:
        # `engine` tells a reader of /version (the replay's report) that this is not vLLM, whose cards the
        # stand-in otherwise imitates (owned_by "vllm")
        return {
            "version": "dflash-factory-target",
            "engine": "stand-in",
            "strategy": self.engine.strategy.name,
        }

    async def prometheus(self) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def create_app(target: Target, **kwargs: Any) -> FastAPI:
    """The server's FastAPI app (see `TargetServer` for the keyword arguments)."""
    return TargetServer(target, **kwargs).app


def serve(
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_model_len: int | None = None,
    served_model_name: str | None = None,
    max_num_seqs: int = 4,
    cache_dir: Path | None = None,
    engine_factory: Callable[[Target], Engine] | None = None,
    threads: int | None = None,
    log_level: str = "info",
    max_tokens_cap: int | None = None,
    prefix_cache_tokens: int = 0,
) -> None:
    """Load `model` and serve it until interrupted. `engine_factory(target) -> Engine` swaps the
    decoding strategy (the DFlash drafter plugs in here); `threads` sets torch's CPU threads;
    `prefix_cache_tokens` > 0 gives the default engine a prefix cache of that many positions."""
    import uvicorn

    from lm.loading import load_target

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if threads:
        import torch

        torch.set_num_threads(threads)  # process-wide: the worker thread's forwards use it too
    started = time.monotonic()
    target = load_target(model, cache_dir=cache_dir)
    prefix = PrefixCache(max_tokens=prefix_cache_tokens) if prefix_cache_tokens else None
    engine = (
        engine_factory(target)
        if engine_factory is not None
        else Engine(target, Autoregressive(prefix=prefix))
    )
    server = TargetServer(
        target,
        engine=engine,
        max_model_len=max_model_len,
        served_model_name=served_model_name,
        max_num_seqs=max_num_seqs,
        max_tokens_cap=max_tokens_cap,
    )
    log.info(
        "loaded %s (%d layers, hidden %d) in %.1fs; serving %r on http://%s:%d (max_model_len %d, strategy %s)",
        target.name,
        target.num_layers,
        target.hidden_size,
        time.monotonic() - started,
        server.model_name,
        host,
        port,
        server.max_model_len,
        engine.strategy.name,
    )
    uvicorn.run(server.app, host=host, port=port, log_level=log_level)
