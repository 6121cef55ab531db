"""Hidden-state extraction, spoken the way vLLM speaks it, from the real CPU model.

vLLM extracts a target's hidden states when it is launched with the ``extract_hidden_states``
speculative method (``draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids``) and the
``ExampleHiddenStatesConnector`` KV connector (``kv_connector_extra_config.shared_storage_path``).
A client then sends each sequence to ``POST /v1/completions`` with the prompt as token ids,
``max_tokens=1`` and ``return_token_ids=true``; the reply echoes ``choices[0].prompt_token_ids`` and
names the file in its top-level ``kv_transfer_params.hidden_states_path``. The file is safetensors with
``hidden_states`` ``[T, len(aux ids), H]`` (the model's dtype) and ``token_ids`` ``[T]``; a companion
``<file>.lock`` is held exclusively until the file is written (readers take a shared ``flock``).

vLLM's aux id ``i`` is the INPUT of decoder layer ``i`` (the residual stream entering it); ``i ==
num_layers`` is the last layer's output before the final norm. This module implements exactly that
definition with forward pre-hooks — deliberately not through ``lm.taps`` (outputs of layer k), so a
client that converts between the two numberings is checked against an independent implementation.

``mount(app, extractor)`` puts the extraction route in front of a stand-in server's own
``/v1/completions`` (as vLLM does in extraction mode, every completion request is an extraction);
``python -m lm.standin.extract --model tiny-qwen3 --aux-layer-ids 2 4 --shared-storage-path DIR`` serves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import typer
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import save_file
from starlette.routing import Route

from clikit import settings_command
from lm.errors import LmError
from lm.loading import load_target
from lm.model import Target
from lm.standin.protocol import response_head, text_choice, usage
from lm.standin.server import TargetServer
from records.atomic import atomic_path

LOCK_SUFFIX = ".lock"


class ExtractionSettings(BaseModel):
    """The stand-in's equivalent of vLLM's ``--speculative-config`` (extract_hidden_states) and
    ``--kv-transfer-config`` (ExampleHiddenStatesConnector)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("tiny-qwen3", description="smollm2, tiny-qwen3, or a Hugging Face model directory.")
    aux_layer_ids: list[int] = Field(
        ...,
        description="vLLM's eagle_aux_hidden_state_layer_ids: id i is the input of decoder layer i; "
        "num_layers is the last layer's output (pre-norm).",
    )
    shared_storage_path: Path = Field(Path("/tmp/hidden_states"), description="Where the files go.")
    allow_custom_save_path: bool = Field(
        False, description="Honour a request's kv_transfer_params.hidden_states_path (trusted clients)."
    )
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, description="Port to listen on.")


class Extractor:
    """Runs one prompt through the model and writes its hidden states the way vLLM's connector does."""

    def __init__(self, target: Target, settings: ExtractionSettings, model_name: str | None = None) -> None:
        n = target.num_layers
        bad = [i for i in settings.aux_layer_ids if not 0 <= i <= n]
        if bad or not settings.aux_layer_ids:
            raise ValueError(
                f"aux layer ids {settings.aux_layer_ids} must lie in 0..{n} for a {n}-layer model"
            )
        self.target, self.settings = target, settings
        self.model_name = model_name or target.name
        self._lock = threading.Lock()  # hooks live on shared modules: one extraction at a time

    @contextlib.contextmanager
    def _capture(self) -> Iterator[dict[int, torch.Tensor]]:
        layers, n, me = self.target.layers, self.target.num_layers, threading.get_ident()
        captured: dict[int, torch.Tensor] = {}

        def before(i: int) -> Any:
            def record(_m: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                if threading.get_ident() == me:  # a concurrent generation forward is not ours
                    captured[i] = args[0] if args else kwargs["hidden_states"]

            return record

        def after(_m: torch.nn.Module, _args: Any, output: Any) -> None:
            if threading.get_ident() == me:
                captured[n] = output[0] if isinstance(output, tuple) else output

        handles = [
            layers[i].register_forward_pre_hook(before(i), with_kwargs=True)
            for i in sorted(set(self.settings.aux_layer_ids))
            if i < n
        ]
        if n in self.settings.aux_layer_ids:
            handles.append(layers[n - 1].register_forward_hook(after))
        try:
            yield captured
        finally:
            for h in handles:
                h.remove()

    @torch.no_grad()
    def hidden_states(self, prompt_ids: Sequence[int]) -> tuple[torch.Tensor, int]:
        """([T, len(aux ids), H] hidden states, the greedy next token) for one prompt."""
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.target.model.device)
        with self._lock, self._capture() as captured:
            out = self.target.model(input_ids=ids, use_cache=False, logits_to_keep=1)
        states = torch.stack([captured[i][0] for i in self.settings.aux_layer_ids], dim=1)
        return states.cpu().contiguous(), int(out.logits[0, -1].argmax())

    def path_for(self, request_id: str, params: dict[str, Any] | None) -> Path:
        custom = (params or {}).get("hidden_states_path")
        if custom and self.settings.allow_custom_save_path:
            return Path(custom)
        return self.settings.shared_storage_path / f"{request_id}.safetensors"

    def write(self, path: Path, states: torch.Tensor, prompt_ids: Sequence[int]) -> None:
        """The file and its lock, as the connector leaves them (the lock released once written)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(path) + LOCK_SUFFIX, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with atomic_path(path) as tmp:
                save_file({"hidden_states": states, "token_ids": torch.tensor(list(prompt_ids))}, str(tmp))
        finally:
            os.close(fd)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One extraction request → vLLM's completion reply with ``kv_transfer_params``."""
        prompt = body.get("prompt")
        if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
            raise _BadRequest(
                "prompt: extraction takes one prompt as a non-empty list of token ids", "prompt"
            )
        if body.get("model") not in (None, self.model_name):
            raise _BadRequest(
                f"model {body.get('model')!r} is not served here ({self.model_name!r})", "model"
            )
        vocab = self.target.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            raise _BadRequest(f"prompt: token ids must lie in 0..{vocab - 1}", "prompt")
        if body.get("max_tokens", 1) != 1:
            raise _BadRequest("max_tokens: extraction generates exactly 1 token", "max_tokens")
        rid = f"cmpl-{uuid.uuid4().hex}"
        states, token = self.hidden_states(prompt)
        path = self.path_for(rid, body.get("kv_transfer_params"))
        self.write(path, states, prompt)
        text = self.target.decode([token]) if self.target.tokenizer is not None else ""
        choice = text_choice(text, "length", None)
        if body.get("return_token_ids"):
            choice.update(prompt_token_ids=list(prompt), token_ids=[token])
        return {
            **response_head(rid, "text_completion", self.model_name),
            "choices": [choice],
            "usage": usage(prompt, [token]),
            "kv_transfer_params": {"hidden_states_path": str(path)},
        }


class _BadRequest(LmError, ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _error(status: int, message: str, param: str | None) -> JSONResponse:
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


def mount(app: FastAPI, extractor: Extractor) -> None:
    """Serve ``POST /v1/completions`` as an extraction, ahead of the app's own completion route."""

    async def completions(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _error(400, f"the body is not JSON: {exc}", None)
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object", None)
        try:
            reply = await asyncio.to_thread(extractor.complete, body)
        except _BadRequest as exc:
            return _error(400, str(exc), exc.param)
        return JSONResponse(reply)

    # Starlette takes the first matching route: in front, this one answers every completion request.
    app.router.routes.insert(0, Route("/v1/completions", completions, methods=["POST"]))


def create_app(target: Target, settings: ExtractionSettings, **server_kwargs: Any) -> FastAPI:
    """The stand-in server (every other route as usual) in extraction mode."""
    server = TargetServer(target, **server_kwargs)
    mount(server.app, Extractor(target, settings, server.model_name))
    return server.app


def main(argv: Sequence[str] | None = None) -> None:
    @settings_command(ExtractionSettings)
    def serve(settings: ExtractionSettings) -> None:
        """Serve a target with vLLM-style hidden-state extraction on /v1/completions."""
        target = load_target(settings.model)
        app = create_app(target, settings)
        typer.echo(
            f"extracting aux layers {settings.aux_layer_ids} of {target.name} to {settings.shared_storage_path}"
        )
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")

    cli = typer.Typer(add_completion=False)
    cli.command()(serve)
    cli(args=list(argv) if argv is not None else None, prog_name="python -m lm.standin.extract")


if __name__ == "__main__":
    main()
