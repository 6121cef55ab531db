"""The brain's HTTP server: the parts of vLLM's API an agent campaign touches.

Routes: POST /v1/chat/completions (whole or streamed, `return_token_ids`), GET /v1/models, POST /tokenize,
GET /health, GET /metrics. Every response carries the rehearsal header."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from records.tags import REHEARSAL_HEADER
from rehearsal import chat as chat_wire
from rehearsal.policy import latency_s, next_turn
from rehearsal.settings import BrainSettings
from rehearsal.tokenizer import encode, render


class _Marked:
    """Adds the rehearsal header to every response, errors included."""

    def __init__(self, app: ASGIApp, model: str) -> None:
        self.app, self.value = app, model.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (REHEARSAL_HEADER.encode(), self.value)]
            await send(message)

        await self.app(scope, receive, marked if scope["type"] == "http" else send)


def _error(status: int, message: str) -> JSONResponse:
    kind = "BadRequestError" if status < 500 else "InternalServerError"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}}, status)


async def _body(request: Request) -> dict[str, Any] | JSONResponse:
    try:
        body = json.loads(await request.body() or b"null")
    except ValueError as exc:
        return _error(400, f"request body is not valid JSON: {exc}")
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object")
    return body


def create_app(settings: BrainSettings) -> Starlette:
    counts: Counter[str] = Counter()
    rng = random.Random(settings.seed)

    async def chat(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, JSONResponse):
            return body
        messages, tools = body.get("messages"), body.get("tools")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages: a non-empty list is required")
        if tools is not None and not isinstance(tools, list):
            return _error(400, "tools: must be a list")
        turn = next_turn(messages, tools, settings)
        prompt = render(messages, tools)
        if len(prompt) >= settings.max_model_len:
            return _error(
                400, f"the prompt has {len(prompt)} tokens; this model serves {settings.max_model_len}"
            )
        ttft, per_token = latency_s(settings, rng)
        counts["requests"] += 1
        counts["prompt_tokens"] += len(prompt)
        counts["tool_calls"] += turn.tool is not None
        if not body.get("stream"):
            reply = chat_wire.whole(turn, body, settings.model, prompt)
            counts["completion_tokens"] += reply["usage"]["completion_tokens"]
            await asyncio.sleep(ttft + per_token * reply["usage"]["completion_tokens"])
            return JSONResponse(reply)

        async def lines() -> Any:
            await asyncio.sleep(ttft)
            for line, tokens in chat_wire.stream(turn, body, settings.model, prompt):
                counts["completion_tokens"] += tokens
                if tokens and per_token:
                    await asyncio.sleep(per_token * tokens)
                yield line

        return StreamingResponse(lines(), media_type="text/event-stream")

    async def models(_: Request) -> Response:
        card = {
            "id": settings.model,
            "object": "model",
            "owned_by": "dflash-rehearsal",
            "root": settings.model,
            "max_model_len": settings.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def tokenize(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, JSONResponse):
            return body
        if isinstance(body.get("messages"), list):
            ids = render(body["messages"], body.get("tools"), bool(body.get("add_generation_prompt", True)))
        elif isinstance(body.get("prompt"), str):
            ids = encode(body["prompt"])
        else:
            return _error(400, "give messages (a list) or prompt (a string)")
        return JSONResponse({"count": len(ids), "max_model_len": settings.max_model_len, "tokens": ids})

    async def metrics(_: Request) -> Response:
        lines = [f"dflash_brain_{k}_total {v}" for k, v in sorted(counts.items())]
        return PlainTextResponse("\n".join(lines) + "\n")

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_Marked, model=settings.model)])


def serve(settings: BrainSettings) -> None:
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning")
