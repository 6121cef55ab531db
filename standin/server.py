"""An OpenAI-compatible server on an in-process target, shaped like vLLM's (docs/vllm-api.md).

Endpoints: /v1/chat/completions, /v1/completions (stream and not), /v1/models, /tokenize, /detokenize,
/health, /version, /metrics. Prompts are rendered by `Target.render`, so `prompt_token_ids` are exactly
what the trainer renders for the same conversation. Model work happens on the scheduler's worker thread;
the event loop only parses, renders (in a thread) and streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import jinja2
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict

from standin.engine import Engine, SamplingParams
from standin.metrics import ServerMetrics
from standin.model import Target
from standin.parsing import OutputStream
from standin.scheduler import Scheduler

log = logging.getLogger(__name__)
T = TypeVar("T")


_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}


class OpenAIError(Exception):
    """An error answered as vLLM answers it: `{"error": {message, type, param, code}}`."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": _ERROR_TYPES.get(self.status, "Error"),
                "param": self.param,
                "code": self.status,
            }
        }


# ---- request bodies (unknown fields are accepted and ignored, as vLLM does) ----------------------------
class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    n: int = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False


class ChatCompletionRequest(_Sampling):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    add_special_tokens: bool = True


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool | None = None  # True for a prompt, False for messages (vLLM's defaults)
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    tokens: list[int]


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


class TargetServer:
    """The FastAPI app (`.app`) around one target, its engine and scheduler."""

    def __init__(
        self,
        target: Target,
        *,
        engine: Engine | None = None,
        max_model_len: int | None = None,
        served_model_name: str | None = None,
        max_num_seqs: int = 4,
        max_tokens_cap: int | None = None,
    ) -> None:
        self.target = target
        # Stand-in only (vLLM has no such switch): agents ask for 32k-token completions, which a CPU
        # cannot produce within a session's time limit, so a requested limit above the cap is lowered.
        self.max_tokens_cap = max_tokens_cap
        self.engine = engine or Engine(target)
        self.max_model_len = max_model_len or target.max_position_embeddings
        if self.max_model_len > target.max_position_embeddings:
            log.warning(
                "max_model_len %d exceeds the model's %d positions",
                self.max_model_len,
                target.max_position_embeddings,
            )
        self.model_name = served_model_name or target.name
        self.created = int(time.time())
        self.scheduler = Scheduler(self.engine, max_running=max_num_seqs)
        self._tokenizer_thread = ThreadPoolExecutor(1, thread_name_prefix="tokenizer")
        self.metrics = ServerMetrics(self.model_name, self.scheduler, self.engine.strategy)
        self.scheduler.on_start = self.metrics.queue_time.labels(self.model_name).observe
        self.app = self._build_app()

    # ---- app ---------------------------------------------------------------------------------------------
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

        app.post("/v1/chat/completions", response_model=None)(self.chat_completions)
        app.post("/v1/completions", response_model=None)(self.completions)
        app.get("/v1/models")(self.models)
        app.post("/tokenize")(self.tokenize)
        app.post("/detokenize")(self.detokenize)
        app.get("/health")(self.health)
        app.get("/version")(self.version)
        app.get("/metrics")(self.prometheus)
        return app

    async def health(self) -> Response:
        return Response(status_code=200)

    async def version(self) -> dict[str, str]:
        return {"version": "dflash-factory-target", "strategy": self.engine.strategy.name}

    async def prometheus(self) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def models(self) -> dict[str, Any]:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.target.name,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        return {"object": "list", "data": [card]}

    # ---- tokenizer endpoints -----------------------------------------------------------------------------
    async def tokenize(self, req: TokenizeRequest) -> dict[str, Any]:
        self._check_model(req.model)
        if req.messages is not None:
            ids = await self._render(
                req.messages,
                req.tools,
                req.add_generation_prompt,
                req.continue_final_message,
                req.chat_template_kwargs,
                add_special_tokens=bool(req.add_special_tokens),
            )
        elif req.prompt is not None:
            add = True if req.add_special_tokens is None else req.add_special_tokens
            ids = await self._off_loop(self.target.encode, req.prompt, add_special_tokens=add)
        else:
            raise OpenAIError(400, "either `prompt` or `messages` is required")
        strs = self.target.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
        return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids, "token_strs": strs}

    async def detokenize(self, req: DetokenizeRequest) -> dict[str, Any]:
        self._check_model(req.model)
        return {"prompt": self.target.decode(req.tokens, skip_special_tokens=False)}

    # ---- generation ----------------------------------------------------------------------------------------
    async def chat_completions(self, req: ChatCompletionRequest) -> Any:
        self._check_model(req.model)
        prompt_ids = await self._render(
            req.messages,
            req.tools,
            req.add_generation_prompt,
            req.continue_final_message,
            req.chat_template_kwargs,
        )
        params = self._params(req, len(prompt_ids), req.max_completion_tokens or req.max_tokens)
        output = OutputStream(
            self.target.tokenizer,
            stop=self._stops(req.stop),
            include_stop_str_in_output=req.include_stop_str_in_output,
            think=self.target.reasoning_format == "think",
            hermes=bool(req.tools) and req.tool_choice != "none" and self.target.tool_call_format == "hermes",
            skip_special_tokens=req.skip_special_tokens,
        )
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        if req.stream:
            return self._stream(self._chat_chunks(rid, req, prompt_ids, params, output))
        token_ids, finish, stop_reason = await self._collect(prompt_ids, params, output)
        m = output.message
        if finish == "stop" and m.tool_calls:
            finish = "tool_calls"
        choice: dict[str, Any] = {
            "index": 0,
            "message": {
                "role": "assistant",
                # beside tool calls or reasoning, empty or blank content is null (as OpenAI sends it)
                "content": m.content if m.content.strip() or not (m.tool_calls or m.reasoning) else None,
                "reasoning_content": m.reasoning or None,
                "tool_calls": [c.to_openai() for c in m.tool_calls],
            },
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": stop_reason,
        }
        if req.return_token_ids:
            choice["token_ids"] = token_ids
        return {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": self._usage(prompt_ids, token_ids),
            "prompt_token_ids": prompt_ids if req.return_token_ids else None,
        }

    async def completions(self, req: CompletionRequest) -> Any:
        self._check_model(req.model)
        prompt_ids = await self._completion_prompt(req)
        params = self._params(req, len(prompt_ids), req.max_tokens)
        output = OutputStream(
            self.target.tokenizer,
            stop=self._stops(req.stop),
            include_stop_str_in_output=req.include_stop_str_in_output,
            skip_special_tokens=req.skip_special_tokens,
        )
        rid = f"cmpl-{uuid.uuid4().hex}"
        if req.stream:
            return self._stream(self._completion_chunks(rid, req, prompt_ids, params, output))
        token_ids, finish, stop_reason = await self._collect(prompt_ids, params, output)
        choice: dict[str, Any] = {
            "index": 0,
            "text": output.message.content,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": stop_reason,
        }
        if req.return_token_ids:
            choice.update(prompt_token_ids=prompt_ids, token_ids=token_ids)
        return {
            "id": rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": self._usage(prompt_ids, token_ids),
        }

    async def _chat_chunks(
        self,
        rid: str,
        req: ChatCompletionRequest,
        prompt_ids: list[int],
        params: SamplingParams,
        output: OutputStream,
    ) -> AsyncGenerator[dict[str, Any], None]:
        base = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model_name,
        }
        first: dict[str, Any] = {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
        if req.return_token_ids:
            first["prompt_token_ids"] = prompt_ids
        yield first
        async with contextlib.aclosing(self._run(prompt_ids, params, output)) as run:
            async for token_ids, delta, finish, stop_reason in run:
                if finish == "stop" and output.message.tool_calls:
                    finish = "tool_calls"
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": finish,
                }
                if finish is not None:
                    choice["stop_reason"] = stop_reason
                if req.return_token_ids:
                    choice["token_ids"] = token_ids
                if delta or finish or (req.return_token_ids and token_ids):
                    yield self._with_usage(req, {**base, "choices": [choice]}, prompt_ids, output)
        if self._include_usage(req):
            yield {**base, "choices": [], "usage": self._usage(prompt_ids, output.token_ids)}

    async def _completion_chunks(
        self,
        rid: str,
        req: CompletionRequest,
        prompt_ids: list[int],
        params: SamplingParams,
        output: OutputStream,
    ) -> AsyncGenerator[dict[str, Any], None]:
        base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": self.model_name}
        sent_prompt = False
        async with contextlib.aclosing(self._run(prompt_ids, params, output)) as run:
            async for token_ids, delta, finish, stop_reason in run:
                choice: dict[str, Any] = {
                    "index": 0,
                    "text": delta.get("content", ""),
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": stop_reason,
                }
                if req.return_token_ids:
                    choice["token_ids"] = token_ids
                    if not sent_prompt:
                        choice["prompt_token_ids"] = prompt_ids
                        sent_prompt = True
                if delta or finish or (req.return_token_ids and token_ids):
                    yield self._with_usage(req, {**base, "choices": [choice]}, prompt_ids, output)
        if self._include_usage(req):
            yield {**base, "choices": [], "usage": self._usage(prompt_ids, output.token_ids)}

    def _stream(self, chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            try:
                async for chunk in chunks:
                    yield _sse(chunk)
            except OpenAIError as e:
                yield _sse(e.body())
            except Exception as e:
                log.exception("stream failed")
                yield _sse(OpenAIError(500, f"{type(e).__name__}: {e}").body())
            yield "data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    async def _run(
        self, prompt_ids: list[int], params: SamplingParams, output: OutputStream
    ) -> AsyncGenerator[tuple[list[int], dict[str, Any], str | None, str | int | None], None]:
        """(new token ids, message delta, finish reason, stop reason) per forward, until finished."""
        start = time.monotonic()
        first_token: float | None = None
        async with contextlib.aclosing(self.scheduler.generate(prompt_ids, params)) as steps:
            async for step in steps:
                if first_token is None and step.token_ids:
                    first_token = time.monotonic()
                delta = output.push(step.token_ids, final=step.finish_reason is not None)
                finish = step.finish_reason
                stop_reason: str | int | None = step.stop_token_id
                if output.stop_string is not None:
                    finish, stop_reason = "stop", output.stop_string
                if finish is not None:
                    now = time.monotonic()
                    self.metrics.finished(
                        prompt_tokens=len(prompt_ids),
                        generation_tokens=len(output.token_ids),
                        reason=finish,
                        ttft=(first_token or now) - start,
                        e2e=now - start,
                    )
                yield step.token_ids, delta, finish, stop_reason
                if finish is not None:
                    return

    async def _collect(
        self, prompt_ids: list[int], params: SamplingParams, output: OutputStream
    ) -> tuple[list[int], str | None, str | int | None]:
        finish: str | None = None
        stop_reason: str | int | None = None
        async with contextlib.aclosing(self._run(prompt_ids, params, output)) as run:
            async for _ids, _delta, last_finish, last_reason in run:
                finish, stop_reason = last_finish, last_reason
        return list(output.token_ids), finish, stop_reason

    # ---- helpers ---------------------------------------------------------------------------------------------
    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise OpenAIError(404, f"The model `{model}` does not exist.", param="model")

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Tokenizer and template work, on one thread of its own: off the event loop, never concurrent."""
        return await asyncio.get_running_loop().run_in_executor(
            self._tokenizer_thread, partial(fn, *args, **kwargs)
        )

    async def _render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        continue_final_message: bool,
        chat_template_kwargs: dict[str, Any] | None,
        *,
        add_special_tokens: bool = False,
    ) -> list[int]:
        """`Target.render` (with vLLM's `add_special_tokens`, False for chat): the prompt the model sees."""
        kwargs = {
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            "chat_template_kwargs": chat_template_kwargs,
        }
        try:
            if not add_special_tokens:
                return await self._off_loop(self.target.render, messages, tools, **kwargs)
            text = await self._off_loop(self.target.render_text, messages, tools, **kwargs)
        except (jinja2.TemplateError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise OpenAIError(400, f"the chat template failed to render the messages: {e}") from e
        return await self._off_loop(self.target.encode, text, add_special_tokens=True)

    async def _completion_prompt(self, req: CompletionRequest) -> list[int]:
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                raise OpenAIError(400, "the stand-in target serves one prompt per request", param="prompt")
            prompt = prompt[0]
        if isinstance(prompt, str):
            return await self._off_loop(self.target.encode, prompt, add_special_tokens=req.add_special_tokens)
        ids = [int(i) for i in prompt]  # type: ignore[arg-type]
        if any(not 0 <= i < self.target.vocab_size for i in ids):
            raise OpenAIError(400, "token id out of vocabulary", param="prompt")
        return ids

    def _params(self, req: _Sampling, n_prompt: int, max_tokens: int | None) -> SamplingParams:
        if req.n != 1:
            raise OpenAIError(400, "the stand-in target supports n=1 only", param="n")
        if n_prompt == 0:
            raise OpenAIError(400, "the prompt is empty", param="prompt")
        limit = self.max_model_len
        if self.max_tokens_cap is not None and (max_tokens is None or max_tokens > self.max_tokens_cap):
            max_tokens = min(self.max_tokens_cap, max(limit - n_prompt, 0))
        # vLLM's own checks and wording (serving_engine._validate_input).
        if n_prompt >= limit:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{n_prompt} tokens in the messages, Please reduce the length of the messages.",
            )
        if max_tokens is None:
            max_tokens = limit - n_prompt
        elif max_tokens < 0:
            raise OpenAIError(400, "max_tokens must be at least 0", param="max_tokens")
        elif n_prompt + max_tokens > limit:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{max_tokens + n_prompt} tokens ({n_prompt} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion.",
            )
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=req.top_k or 0,
            seed=req.seed,
            stop_token_ids=frozenset(req.stop_token_ids or ()),
            ignore_eos=req.ignore_eos,
        )

    @staticmethod
    def _stops(stop: str | list[str] | None) -> Sequence[str]:
        return [stop] if isinstance(stop, str) else list(stop or [])

    @staticmethod
    def _usage(prompt_ids: list[int], token_ids: list[int]) -> dict[str, int]:
        return {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(token_ids),
            "total_tokens": len(prompt_ids) + len(token_ids),
        }

    @staticmethod
    def _include_usage(req: _Sampling) -> bool:
        return bool((req.stream_options or {}).get("include_usage"))

    def _with_usage(
        self, req: _Sampling, chunk: dict[str, Any], prompt_ids: list[int], output: OutputStream
    ) -> dict[str, Any]:
        options = req.stream_options or {}
        if options.get("include_usage") and options.get("continuous_usage_stats"):
            chunk["usage"] = self._usage(prompt_ids, output.token_ids)
        return chunk


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
) -> None:
    """Load `model` and serve it until interrupted. `engine_factory(target) -> Engine` swaps the
    decoding strategy (the DFlash drafter plugs in here); `threads` sets torch's CPU threads."""
    import uvicorn

    from standin.loading import load_target

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if threads:
        import torch

        torch.set_num_threads(threads)  # process-wide: the worker thread's forwards use it too
    started = time.monotonic()
    target = load_target(model, cache_dir=cache_dir)
    engine = engine_factory(target) if engine_factory is not None else Engine(target)
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
