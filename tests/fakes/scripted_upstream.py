"""A scripted stand-in for the target model server, speaking vLLM's APIs on loopback.

Why a fake: the real target is a GPU vLLM that cannot run on these machines, and the tests need an
upstream whose answers are known: one shell tool call that creates ``AGENT_PROOF.txt``, then text.

    python -m tests.fakes.scripted_upstream --port P [--apis all|chat] [--record-dir DIR]

Routes: ``/v1/messages`` (+ ``/count_tokens``), ``/v1/responses``, ``/v1/chat/completions``,
``/v1/completions``, ``/v1/models``, ``/tokenize``, ``/detokenize``, ``/health``; with ``--apis chat`` only
Chat Completions, models, tokenize and health (the rest is 404). ``GET /_scripted/requests`` lists what it
received (``DELETE`` clears). Model names / the ``x-scripted-fault`` header switch on ``bench-N``,
``drop-after-N``, ``slow-MS``, ``status-CODE`` and ``compress-gzip|br|zstd`` (see ``scripted_policy``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes import wire_anthropic, wire_chat, wire_responses
from tests.fakes.capture import Recorder, RecordingMiddleware, decode_body
from tests.fakes.scripted_policy import (
    FAULT_HEADER,
    Behaviour,
    Reply,
    bench_reply,
    decide,
    encode,
    parse_behaviour,
    render_chat,
)
from tests.fakes.streaming import ChunkedResponse

ALL_APIS = ("messages", "responses", "chat", "completions")
MAX_MODEL_LEN = 131072


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(decode_body(raw, request.headers.get("content-encoding")) or b"null")
    except (ValueError, OSError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


# JSON types a field must have when present (a real server rejects the rest with a 400 too)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "messages": (list,),
    "tools": (list,),
    "input": (str, list),
    "prompt": (str, list),
    "max_tokens": (int,),
    "stream": (bool,),
    "stream_options": (dict,),
}


def _require(body: dict[str, Any], *fields: str) -> None:
    missing = [f for f in fields if f not in body]
    if missing:
        raise ApiError(400, f"missing required field(s): {', '.join(missing)}")
    for name, types in FIELD_TYPES.items():
        if name in body and body[name] is not None and not isinstance(body[name], types):
            raise ApiError(400, f"field {name!r} has the wrong type {type(body[name]).__name__}")
    for name in ("messages", "tools"):
        if any(not isinstance(item, dict) for item in body.get(name) or []):
            raise ApiError(400, f"every entry of {name!r} must be an object")


Builder = Callable[[Reply, dict[str, Any], str], Any]


class ApiSpec:
    """How one API reads a request and writes replies, streamed or not."""

    def __init__(
        self,
        required: tuple[str, ...],
        tool_result: Callable[[dict[str, Any]], bool],
        full: Builder,
        stream: Builder,
        error: Callable[[int, str], dict[str, Any]],
        bench: Builder | None = None,
    ) -> None:
        self.required, self.tool_result, self.full, self.stream = required, tool_result, full, stream
        self.error, self.bench = error, bench


SPECS = {
    "messages": ApiSpec(
        ("model", "messages", "max_tokens"),
        wire_anthropic.has_tool_result,
        wire_anthropic.full_response,
        wire_anthropic.stream_events,
        wire_anthropic.error_body,
    ),
    "responses": ApiSpec(
        ("model", "input"),
        wire_responses.has_tool_result,
        wire_responses.full_response,
        wire_responses.stream_events,
        wire_responses.error_body,
    ),
    "chat": ApiSpec(
        ("model", "messages"),
        wire_chat.has_tool_result,
        wire_chat.full_response,
        wire_chat.stream_events,
        wire_chat.error_body,
        bench=lambda reply, body, model: wire_chat.bench_stream(len(reply.text_deltas), body, model),
    ),
    "completions": ApiSpec(
        ("model", "prompt"),
        lambda body: True,  # no tools on the legacy API: always plain text
        wire_chat.completion_full,
        wire_chat.completion_stream,
        wire_chat.error_body,
    ),
}


def _error(spec: ApiSpec, status: int, message: str) -> JSONResponse:
    return JSONResponse(spec.error(status, message), status_code=status)


async def generate(api: str, request: Request) -> Response:
    spec = SPECS[api]
    try:
        body = await read_json(request)
        _require(body, *spec.required)
    except ApiError as exc:
        return _error(spec, exc.status, str(exc))
    model = str(body.get("model"))
    how = parse_behaviour(model, request.headers.get(FAULT_HEADER))
    if how.slow_ms:
        await asyncio.sleep(how.slow_ms / 1000)
    if how.status:
        return _error(spec, how.status, f"scripted failure {how.status} for model {model!r}")
    if how.bench_chunks is not None:
        reply = bench_reply(how.bench_chunks)
    else:
        reply = decide(body.get("tools"), spec.tool_result(body))
    if body.get("stream"):
        build = spec.bench if (how.bench_chunks is not None and spec.bench) else spec.stream
        return _stream_response(build(reply, body, model), how)
    payload = json.dumps(spec.full(reply, body, model), separators=(",", ":")).encode()
    return ChunkedResponse(iter([payload]), how, media_type="application/json", length=len(payload))


def _stream_response(chunks: Iterator[bytes], how: Behaviour) -> Response:
    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    return ChunkedResponse(chunks, how, media_type="text/event-stream", headers=headers)


def _route(api: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return await generate(api, request)

    return endpoint


async def count_tokens(request: Request) -> Response:
    try:
        body = await read_json(request)
        _require(body, "model", "messages")
    except ApiError as exc:
        return JSONResponse(wire_anthropic.error_body(exc.status, str(exc)), status_code=exc.status)
    return JSONResponse({"input_tokens": wire_anthropic.input_tokens(body)})


async def tokenize(request: Request) -> Response:
    """vLLM's /tokenize: ``prompt`` text, or ``messages`` (+ ``tools``) through the chat rendering."""
    try:
        body = await read_json(request)
    except ApiError as exc:
        return JSONResponse(wire_chat.error_body(exc.status, str(exc)), status_code=exc.status)
    if "messages" in body:
        text = render_chat(body["messages"], body.get("tools"), bool(body.get("add_generation_prompt", True)))
    elif isinstance(body.get("prompt"), str):
        text = body["prompt"]
    else:
        return JSONResponse(wire_chat.error_body(400, "give `prompt` or `messages`"), status_code=400)
    tokens = encode(text)
    return JSONResponse(
        {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens, "token_strs": None}
    )


async def detokenize(request: Request) -> Response:
    try:
        body = await read_json(request)
        tokens = bytes(int(t) for t in body.get("tokens", []))
    except (ApiError, ValueError, TypeError) as exc:
        return JSONResponse(wire_chat.error_body(400, f"bad tokens: {exc}"), status_code=400)
    return JSONResponse({"prompt": tokens.decode("utf-8", errors="replace")})


def create_app(
    apis: str | tuple[str, ...] = "all",
    record_dir: Path | None = None,
    model_ids: tuple[str, ...] = ("scripted",),
) -> Starlette:
    """Build the app. ``apis``: "all", "chat", or a comma list of messages,responses,chat,completions."""
    served = _parse_apis(apis)
    recorder = Recorder(record_dir)

    async def models(request: Request) -> Response:
        if "messages" in served and "anthropic-version" in request.headers:
            return JSONResponse(wire_anthropic.models_body(list(model_ids)))
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "scripted", "max_model_len": MAX_MODEL_LEN}
            for m in model_ids
        ]
        return JSONResponse({"object": "list", "data": data})

    async def requests_log(request: Request) -> Response:
        if request.method == "DELETE":
            recorder.clear()
            return JSONResponse({"cleared": True})
        return JSONResponse(recorder.records())

    routes = [
        Route("/health", lambda r: Response(status_code=200), methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/_scripted/requests", requests_log, methods=["GET", "DELETE"]),
    ]
    paths = {
        "messages": "/v1/messages",
        "responses": "/v1/responses",
        "chat": "/v1/chat/completions",
        "completions": "/v1/completions",
    }
    routes += [Route(paths[api], _route(api), methods=["POST"]) for api in served]
    if "messages" in served:
        routes.append(Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]))

    async def not_found(request: Request, exc: Exception) -> Response:
        message = f"{request.method} {request.url.path} is not served by this scripted upstream"
        if request.url.path.startswith("/v1/messages"):
            return JSONResponse(wire_anthropic.error_body(404, message), status_code=404)
        return JSONResponse(wire_chat.error_body(404, message), status_code=404)

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    app.state.recorder = recorder
    app.state.apis = served
    app.add_middleware(RecordingMiddleware, recorder=recorder)
    return app


def _parse_apis(apis: str | tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(apis, str):
        apis = ALL_APIS if apis == "all" else tuple(a.strip() for a in apis.split(",") if a.strip())
    unknown = set(apis) - set(ALL_APIS)
    if unknown or not apis:
        raise ValueError(f"unknown APIs {sorted(unknown)}; choose from all or {', '.join(ALL_APIS)}")
    return tuple(apis)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--apis", default="all", help="all, chat, or a comma list of " + ",".join(ALL_APIS))
    parser.add_argument("--record-dir", type=Path, default=None, help="write every request here as JSON")
    parser.add_argument("--models", default="scripted", help="comma list of model ids for /v1/models")
    args = parser.parse_args(argv)
    app = create_app(args.apis, args.record_dir, tuple(args.models.split(",")))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
