"""The OpenAI/vLLM wire shapes of the stand-in server: request bodies, errors, SSE framing, usage, and
vLLM's own request checks (context length, `n`, `max_tokens`) with its wording."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from lm.engine import SamplingParams
from lm.errors import LmError

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}


class OpenAIError(LmError):
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
class SamplingRequest(BaseModel):
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


class ChatCompletionRequest(SamplingRequest):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionRequest(SamplingRequest):
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


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def stops(stop: str | list[str] | None) -> Sequence[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def response_head(rid: str, obj: str, model: str) -> dict[str, Any]:
    """The fields a response, and each streamed chunk of one, starts with."""
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model}


def text_choice(text: str, finish: str | None, stop_reason: str | int | None) -> dict[str, Any]:
    """A `text_completion`'s choice (the only one: `n` is 1)."""
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": stop_reason}


def usage(prompt_ids: list[int], token_ids: list[int]) -> dict[str, int]:
    return {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(token_ids),
        "total_tokens": len(prompt_ids) + len(token_ids),
    }


def include_usage(req: SamplingRequest) -> bool:
    return bool((req.stream_options or {}).get("include_usage"))


def with_usage(
    req: SamplingRequest, chunk: dict[str, Any], prompt_ids: list[int], token_ids: list[int]
) -> dict[str, Any]:
    """A chunk with the running usage when `continuous_usage_stats` asks for it on every chunk."""
    options = req.stream_options or {}
    if options.get("include_usage") and options.get("continuous_usage_stats"):
        chunk["usage"] = usage(prompt_ids, token_ids)
    return chunk


def sampling_params(
    req: SamplingRequest,
    n_prompt: int,
    max_tokens: int | None,
    *,
    max_model_len: int,
    max_tokens_cap: int | None = None,
) -> SamplingParams:
    """The engine's parameters for a request, refused as vLLM refuses it (serving_engine._validate_input)."""
    if req.n != 1:
        raise OpenAIError(400, "the stand-in target supports n=1 only", param="n")
    if n_prompt == 0:
        raise OpenAIError(400, "the prompt is empty", param="prompt")
    limit = max_model_len
    if max_tokens_cap is not None and (max_tokens is None or max_tokens > max_tokens_cap):
        max_tokens = min(max_tokens_cap, max(limit - n_prompt, 0))
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
