"""The server's tokenizer side, off the event loop: the served name and context, chat rendering,
completion prompts, /tokenize and /detokenize. Model forwards never happen here (see scheduler.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypedDict, TypeVar

import jinja2

from lm.engine import SamplingParams
from lm.model import Target
from lm.standin.protocol import (
    CompletionRequest,
    DetokenizeRequest,
    OpenAIError,
    SamplingRequest,
    TokenizeRequest,
    sampling_params,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class FrontendOptions(TypedDict, total=False):
    """`Frontend`'s keyword arguments, as a server passes them on."""

    max_model_len: int | None
    served_model_name: str | None
    max_tokens_cap: int | None


class Frontend:
    def __init__(
        self,
        target: Target,
        *,
        max_model_len: int | None = None,
        served_model_name: str | None = None,
        max_tokens_cap: int | None = None,
    ) -> None:
        self.target = target
        # Stand-in only (vLLM has no such switch): agents ask for 32k-token completions, which a CPU
        # cannot produce within a session's time limit, so a requested limit above the cap is lowered.
        self.max_tokens_cap = max_tokens_cap
        self.max_model_len = max_model_len or target.max_position_embeddings
        if self.max_model_len > target.max_position_embeddings:
            log.warning(
                "max_model_len %d exceeds the model's %d positions",
                self.max_model_len,
                target.max_position_embeddings,
            )
        self.model_name = served_model_name or target.name
        self.created = int(time.time())
        self._tokenizer_thread = ThreadPoolExecutor(1, thread_name_prefix="tokenizer")

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise OpenAIError(404, f"The model `{model}` does not exist.", param="model")

    def params(self, req: SamplingRequest, n_prompt: int, max_tokens: int | None) -> SamplingParams:
        return sampling_params(
            req, n_prompt, max_tokens, max_model_len=self.max_model_len, max_tokens_cap=self.max_tokens_cap
        )

    async def off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Tokenizer and template work, on one thread of its own: off the event loop, never concurrent."""
        return await asyncio.get_running_loop().run_in_executor(
            self._tokenizer_thread, partial(fn, *args, **kwargs)
        )

    async def render(
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
                return await self.off_loop(self.target.render, messages, tools, **kwargs)
            text = await self.off_loop(self.target.render_text, messages, tools, **kwargs)
        except (jinja2.TemplateError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise OpenAIError(400, f"the chat template failed to render the messages: {e}") from e
        return await self.off_loop(self.target.encode, text, add_special_tokens=True)

    async def completion_prompt(self, req: CompletionRequest) -> list[int]:
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                raise OpenAIError(400, "the stand-in target serves one prompt per request", param="prompt")
            prompt = prompt[0]
        if isinstance(prompt, str):
            return await self.off_loop(self.target.encode, prompt, add_special_tokens=req.add_special_tokens)
        ids = [int(i) for i in prompt]  # type: ignore[arg-type]
        if any(not 0 <= i < self.target.vocab_size for i in ids):
            raise OpenAIError(400, "token id out of vocabulary", param="prompt")
        return ids

    # ---- routes ------------------------------------------------------------------------------------------
    async def models(self) -> dict[str, Any]:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.target.source or self.target.name,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        return {"object": "list", "data": [card]}

    async def tokenize(self, req: TokenizeRequest) -> dict[str, Any]:
        self.check_model(req.model)
        if req.messages is not None:
            ids = await self.render(
                req.messages,
                req.tools,
                req.add_generation_prompt,
                req.continue_final_message,
                req.chat_template_kwargs,
                add_special_tokens=bool(req.add_special_tokens),
            )
        elif req.prompt is not None:
            add = True if req.add_special_tokens is None else req.add_special_tokens
            ids = await self.off_loop(self.target.encode, req.prompt, add_special_tokens=add)
        else:
            raise OpenAIError(400, "either `prompt` or `messages` is required")
        strs = self.target.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
        return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids, "token_strs": strs}

    async def detokenize(self, req: DetokenizeRequest) -> dict[str, Any]:
        self.check_model(req.model)
        return {"prompt": self.target.decode(req.tokens, skip_special_tokens=False)}
