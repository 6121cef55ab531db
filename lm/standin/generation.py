"""/v1/chat/completions and /v1/completions, streamed and not: a request's forwards come from the
scheduler, its tokens become message parts (`OutputStream`), the finished request is counted."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from lm.engine import SamplingParams
from lm.standin.frontend import Frontend
from lm.standin.metrics import ServerMetrics
from lm.standin.parsing import OutputStream
from lm.standin.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    include_usage,
    response_head,
    sse,
    stops,
    text_choice,
    usage,
    with_usage,
)
from lm.standin.scheduler import Scheduler

log = logging.getLogger(__name__)
# (new token ids, message delta, finish reason, stop reason): one per forward
Event = tuple[list[int], dict[str, Any], str | None, str | int | None]


def stream_response(chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """SSE of `chunks`; a failure mid-stream is a `data: {"error": …}` event, then `[DONE]` as always."""

    async def body() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield sse(chunk)
        except OpenAIError as e:
            yield sse(e.body())
        except Exception as e:
            log.exception("stream failed")
            yield sse(OpenAIError(500, f"{type(e).__name__}: {e}").body())
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


class Generation:
    def __init__(self, frontend: Frontend, scheduler: Scheduler, metrics: ServerMetrics) -> None:
        self.frontend, self.scheduler, self.metrics = frontend, scheduler, metrics

    async def chat_completions(self, req: ChatCompletionRequest) -> Any:
        fe = self.frontend
        fe.check_model(req.model)
        prompt_ids = await fe.render(
            req.messages,
            req.tools,
            req.add_generation_prompt,
            req.continue_final_message,
            req.chat_template_kwargs,
        )
        params = fe.params(req, len(prompt_ids), req.max_completion_tokens or req.max_tokens)
        output = OutputStream(
            fe.target.tokenizer,
            stop=stops(req.stop),
            include_stop_str_in_output=req.include_stop_str_in_output,
            think=fe.target.reasoning_format == "think",
            hermes=bool(req.tools) and req.tool_choice != "none" and fe.target.tool_call_format == "hermes",
            skip_special_tokens=req.skip_special_tokens,
        )
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        if req.stream:
            return stream_response(self._chat_chunks(rid, req, prompt_ids, params, output))
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
            **response_head(rid, "chat.completion", fe.model_name),
            "choices": [choice],
            "usage": usage(prompt_ids, token_ids),
            "prompt_token_ids": prompt_ids if req.return_token_ids else None,
        }

    async def completions(self, req: CompletionRequest) -> Any:
        fe = self.frontend
        fe.check_model(req.model)
        prompt_ids = await fe.completion_prompt(req)
        params = fe.params(req, len(prompt_ids), req.max_tokens)
        output = OutputStream(
            fe.target.tokenizer,
            stop=stops(req.stop),
            include_stop_str_in_output=req.include_stop_str_in_output,
            skip_special_tokens=req.skip_special_tokens,
        )
        rid = f"cmpl-{uuid.uuid4().hex}"
        if req.stream:
            return stream_response(self._completion_chunks(rid, req, prompt_ids, params, output))
        token_ids, finish, stop_reason = await self._collect(prompt_ids, params, output)
        choice = text_choice(output.message.content, finish, stop_reason)
        if req.return_token_ids:
            choice.update(prompt_token_ids=prompt_ids, token_ids=token_ids)
        return {
            **response_head(rid, "text_completion", fe.model_name),
            "choices": [choice],
            "usage": usage(prompt_ids, token_ids),
        }

    async def _chat_chunks(
        self,
        rid: str,
        req: ChatCompletionRequest,
        prompt_ids: list[int],
        params: SamplingParams,
        output: OutputStream,
    ) -> AsyncGenerator[dict[str, Any], None]:
        base = response_head(rid, "chat.completion.chunk", self.frontend.model_name)
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
                    yield with_usage(req, {**base, "choices": [choice]}, prompt_ids, output.token_ids)
        if include_usage(req):
            yield {**base, "choices": [], "usage": usage(prompt_ids, output.token_ids)}

    async def _completion_chunks(
        self,
        rid: str,
        req: CompletionRequest,
        prompt_ids: list[int],
        params: SamplingParams,
        output: OutputStream,
    ) -> AsyncGenerator[dict[str, Any], None]:
        base = response_head(rid, "text_completion", self.frontend.model_name)
        sent_prompt = False
        async with contextlib.aclosing(self._run(prompt_ids, params, output)) as run:
            async for token_ids, delta, finish, stop_reason in run:
                choice = text_choice(delta.get("content", ""), finish, stop_reason)
                if req.return_token_ids:
                    choice["token_ids"] = token_ids
                    if not sent_prompt:
                        choice["prompt_token_ids"] = prompt_ids
                        sent_prompt = True
                if delta or finish or (req.return_token_ids and token_ids):
                    yield with_usage(req, {**base, "choices": [choice]}, prompt_ids, output.token_ids)
        if include_usage(req):
            yield {**base, "choices": [], "usage": usage(prompt_ids, output.token_ids)}

    async def _run(
        self, prompt_ids: list[int], params: SamplingParams, output: OutputStream
    ) -> AsyncGenerator[Event, None]:
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
