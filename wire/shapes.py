"""One `ApiShape` per upstream API, looked up by its `Api` name in `API_SHAPES`: what the proxy and the
trainer know of an API (its route, the fields it must carry, how it translates to and from Chat, how its
replies assemble and fail) is read here instead of branching on the API's name in each module.

Adding an API is its functions in `wire` and one entry below. Chat Completions is the pivot: the shape the
others translate into, so its own shape has no translators.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from wire.anthropic_request import (
    anthropic_to_chat_request,
    count_tokens_to_tokenize_request,
    tokenize_to_count_tokens,
)
from wire.anthropic_response import chat_to_anthropic_message
from wire.anthropic_stream import AnthropicStreamTranslator
from wire.apis import Api
from wire.assemble import (
    Assembled,
    StreamBody,
    Summary,
    anthropic_stream_body,
    anthropic_summary,
    assemble_with,
    chat_stream_body,
    chat_summary,
    count_tokens_summary,
    responses_stream_body,
    responses_summary,
    summarize_with,
)
from wire.common import JSON, Translated
from wire.continued import anthropic_with_reply, responses_with_reply
from wire.errors import anthropic_stream_error, chat_stream_error, responses_stream_error
from wire.responses_request import responses_to_chat_request, responses_to_tokenize_request
from wire.responses_response import chat_to_responses_response
from wire.responses_stream import ResponsesStreamTranslator
from wire.reverse import chat_to_anthropic_request, chat_to_responses_request
from wire.stream_base import ChatStreamTranslator

# Which error body a client of the API reads (and which headers its upstream expects).
Family = Literal["anthropic", "openai"]


class ToChat(Protocol):
    """A client body → the Chat body (or `/tokenize` body) rendering the same prompt."""

    def __call__(self, body: Mapping[str, Any], *, model: str | None = ...) -> Translated: ...


class ToChatWithIds(Protocol):
    def __call__(
        self, body: Mapping[str, Any], *, model: str | None = ..., return_token_ids: bool = ...
    ) -> Translated: ...


class FromChat(Protocol):
    """A Chat reply → the client's reply, given the client's own request."""

    def __call__(self, chat: Mapping[str, Any], request: Mapping[str, Any] | None = ...) -> JSON: ...


@dataclass(frozen=True)
class ApiShape:
    api: Api
    method: str
    path: str  # the route the proxy relays it on
    required: tuple[str, ...] = ()  # fields a request must carry (the proxy rejects it otherwise)
    at_least_one: tuple[str, ...] = ()  # required integer fields that must be ≥ 1
    family: Family = "openai"
    limit_fields: tuple[str, ...] = ()  # its completion limit's field(s), the current spelling first
    token_ids: bool = False  # a vLLM reply carries token ids when the request asks (`return_token_ids`)
    to_chat: ToChatWithIds | None = None  # translated for a Chat-only upstream (--upstream-api chat)
    from_chat: FromChat | None = None  # the Chat reply back in this API's shape
    stream: Callable[[Mapping[str, Any]], ChatStreamTranslator] | None = None  # Chat chunks → its events
    tokenize: ToChat | None = None  # the `/tokenize` body rendering the prompt
    from_tokenize: Callable[[Mapping[str, Any]], JSON] | None = None  # answered from `/tokenize` alone
    with_reply: Callable[[Mapping[str, Any], Mapping[str, Any]], JSON] | None = None  # request + its reply
    from_chat_request: Callable[[Mapping[str, Any]], JSON] | None = None  # a Chat body in this shape
    stream_body: StreamBody | None = None  # its stream events → its non-streaming body
    summary: Summary | None = None  # usage, finish reason, ids out of its body
    stream_error: Callable[[str], bytes] = chat_stream_error  # the event that ends a failed stream

    @property
    def fills_prompt_ids(self) -> bool:
        """A native call of this API can have its prompt ids filled from `/tokenize` (--tokenize-native)."""
        return self.to_chat is not None and self.tokenize is not None

    def assemble(self, data: bytes | Iterable[bytes], is_stream: bool) -> Assembled:
        return assemble_with(self.stream_body, self.summary, data, is_stream)

    def summarize(self, body: dict[str, Any] | None) -> Assembled:
        return summarize_with(self.summary, body)


API_SHAPES: dict[Api, ApiShape] = {
    s.api: s
    for s in (
        ApiShape(
            Api.MESSAGES,
            "POST",
            "/v1/messages",
            ("model", "messages", "max_tokens"),
            at_least_one=("max_tokens",),
            family="anthropic",
            limit_fields=("max_tokens",),
            to_chat=anthropic_to_chat_request,
            from_chat=chat_to_anthropic_message,
            stream=AnthropicStreamTranslator,
            tokenize=count_tokens_to_tokenize_request,
            with_reply=anthropic_with_reply,
            from_chat_request=chat_to_anthropic_request,
            stream_body=anthropic_stream_body,
            summary=anthropic_summary,
            stream_error=anthropic_stream_error,
        ),
        ApiShape(
            Api.COUNT_TOKENS,
            "POST",
            "/v1/messages/count_tokens",
            ("model", "messages"),
            family="anthropic",
            tokenize=count_tokens_to_tokenize_request,
            from_tokenize=tokenize_to_count_tokens,
            summary=count_tokens_summary,
        ),
        ApiShape(
            Api.RESPONSES,
            "POST",
            "/v1/responses",
            ("model",),
            limit_fields=("max_output_tokens",),
            to_chat=responses_to_chat_request,
            from_chat=chat_to_responses_response,
            stream=ResponsesStreamTranslator,
            tokenize=responses_to_tokenize_request,
            with_reply=responses_with_reply,
            from_chat_request=chat_to_responses_request,
            stream_body=responses_stream_body,
            summary=responses_summary,
            stream_error=responses_stream_error,
        ),
        ApiShape(
            Api.CHAT,
            "POST",
            "/v1/chat/completions",
            ("model", "messages"),
            limit_fields=("max_completion_tokens", "max_tokens"),
            token_ids=True,
            stream_body=chat_stream_body,
            summary=chat_summary,
        ),
        ApiShape(
            Api.COMPLETIONS,
            "POST",
            "/v1/completions",
            ("model", "prompt"),
            limit_fields=("max_tokens",),
            stream_body=chat_stream_body,
            summary=chat_summary,
        ),
        ApiShape(Api.MODELS, "GET", "/v1/models"),
    )
}
CHAT = API_SHAPES[Api.CHAT]  # the pivot: what the others translate into


def shape_of(api: str | None) -> ApiShape | None:
    """The shape of a recorded or relayed call's `api` (a string in the records), None for a name no API has."""
    try:
        return API_SHAPES[Api(api)] if api is not None else None
    except ValueError:
        return None


def assemble(api: str, data: bytes | Iterable[bytes], is_stream: bool) -> Assembled:
    """A reply of `api` (whole or streamed) as its non-streaming body plus usage and token ids."""
    shape = shape_of(api)
    return shape.assemble(data, is_stream) if shape else assemble_with(None, None, data, is_stream)


def summarize(api: str, body: dict[str, Any] | None) -> Assembled:
    shape = shape_of(api)
    return shape.summarize(body) if shape else summarize_with(None, body)
