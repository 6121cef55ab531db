"""Exchanges that change bytes: vLLM token ids on Chat Completions, and translation to a Chat upstream.

Each is one small class; `exchange_factory(settings)` picks one per call. Translation state (the
stream translators) lives in `wire`; these classes only wire it to the relay.
"""

from __future__ import annotations

import json
from typing import Any

from proxy import errors
from proxy.config import ProxySettings
from proxy.exchange import Exchange, ExchangeFactory, Passthrough
from proxy.limits import capped
from proxy.record import Call
from proxy.tokenize import TOKENIZE_FLAG
from wire import (
    AnthropicStreamTranslator,
    ResponsesStreamTranslator,
    SSETokenIdStripper,
    Translated,
    anthropic_to_chat_request,
    chat_to_anthropic_message,
    chat_to_responses_response,
    count_tokens_to_tokenize_request,
    responses_to_chat_request,
    strip_token_ids_bytes,
    tokenize_to_count_tokens,
)

CHAT_PATH = "/v1/chat/completions"


class ChatTokenIds:
    """Native Chat Completions with `return_token_ids` added; the ids are cut from what the client sees."""

    rewrites = True

    def __init__(self, upstream_path: str, body: dict[str, Any]) -> None:
        self.upstream_path = upstream_path
        self.upstream_body = dumps({**body, "return_token_ids": True})
        self._stripper = SSETokenIdStripper()

    def chunk(self, data: bytes) -> bytes:
        return self._stripper.feed(data)

    def end(self) -> bytes:
        return self._stripper.flush()

    def body(self, data: bytes, status: int) -> bytes:
        return strip_token_ids_bytes(data)


class CappedPassthrough(Passthrough):
    """The client's request with its completion limit lowered (proxy/limits.py), the reply as the upstream
    sent it. The body changed, so it goes up uncompressed (its own length, no client encoding)."""

    rewrites = True


class _Translating:
    """Common shape of the translating exchanges: a chat request up, the client's API back."""

    rewrites = True
    upstream_path = CHAT_PATH
    family = "anthropic"  # the client's error shape
    _stream: AnthropicStreamTranslator | ResponsesStreamTranslator

    def __init__(self, call: Call, translated: Translated, request: dict[str, Any]) -> None:
        self.request = request
        self.upstream_body = dumps(translated.request)
        call.translated = True
        call.dropped_fields = [
            f"{n.path}: {n.action} ({n.detail})" + (f" x{n.count}" if n.count > 1 else "")
            for n in translated.dropped
        ]

    def end(self) -> bytes:
        return self._stream.end_bytes()

    def chunk(self, data: bytes) -> bytes:
        return self._stream.feed_bytes(data)

    def body(self, data: bytes, status: int) -> bytes:
        try:
            reply = json.loads(data)
        except (ValueError, RecursionError):
            reply = data[:500].decode("utf-8", errors="replace")
        if status >= 400:
            # An upstream error, re-shaped for the client's API (same mechanism as the proxy's own).
            return errors.error_body(self.family, status, _error_message(reply))
        if not isinstance(reply, dict) or not self._is_answer(reply):
            raise errors.BadReply(
                f"upstream answered {status} without a reply: {_error_message(reply)[:500]}"
            )
        return dumps(self._from_upstream(reply))

    def _is_answer(self, reply: dict[str, Any]) -> bool:
        return "choices" in reply

    def _from_upstream(self, reply: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


def dumps(obj: Any) -> bytes:
    """JSON bytes as compact as the client's own; a string with a lone surrogate (a JS client cutting an emoji
    in half) cannot be UTF-8, so then the JSON escapes everything non-ASCII and stays what the client sent."""
    try:
        return json.dumps(obj, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(obj).encode()


def _error_message(reply: Any) -> str:
    err = reply.get("error") if isinstance(reply, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err or (reply.get("message") if isinstance(reply, dict) else reply) or "upstream error")


class MessagesViaChat(_Translating):
    def __init__(self, call: Call, body: dict[str, Any], return_token_ids: bool) -> None:
        super().__init__(call, anthropic_to_chat_request(body, return_token_ids=return_token_ids), body)
        self._stream = AnthropicStreamTranslator(body)

    def _from_upstream(self, reply: dict[str, Any]) -> dict[str, Any]:
        return chat_to_anthropic_message(reply, self.request)


class ResponsesViaChat(_Translating):
    family = "openai"

    def __init__(self, call: Call, body: dict[str, Any], return_token_ids: bool) -> None:
        super().__init__(call, responses_to_chat_request(body, return_token_ids=return_token_ids), body)
        self._stream = ResponsesStreamTranslator(body)

    def _from_upstream(self, reply: dict[str, Any]) -> dict[str, Any]:
        return chat_to_responses_response(reply, self.request)


class CountTokensViaTokenize(_Translating):
    """`count_tokens` answered from the upstream's `/tokenize` (vLLM, the CPU stand-in); never streamed."""

    upstream_path = "/tokenize"

    def __init__(self, call: Call, body: dict[str, Any]) -> None:
        super().__init__(call, count_tokens_to_tokenize_request(body), body)

    def _is_answer(self, reply: dict[str, Any]) -> bool:
        return "count" in reply or "tokens" in reply

    def _from_upstream(self, reply: dict[str, Any]) -> dict[str, Any]:
        return tokenize_to_count_tokens(reply)


def exchange_factory(settings: ProxySettings) -> ExchangeFactory:
    chat_mode = settings.upstream_api == "chat"
    ids = settings.return_token_ids
    tokenize = settings.tokenize_native

    def choose(call: Call, upstream_path: str, raw_body: bytes, body: dict[str, Any] | None) -> Exchange:
        if body is None:
            return Passthrough(upstream_path, raw_body)
        if (lowered := capped(call.api, body, settings.max_tokens_cap, settings.served_context)) is not None:
            body, call.max_tokens_capped = lowered
            raw_body = dumps(body)  # what goes upstream; the client's own body is recorded as it sent it
        if call.api == "openai_chat" and ids and "return_token_ids" not in body:
            return ChatTokenIds(upstream_path, body)
        if chat_mode and call.api == "anthropic_messages":
            return MessagesViaChat(call, body, ids)
        if chat_mode and call.api == "openai_responses":
            return ResponsesViaChat(call, body, ids)
        if chat_mode and call.api == "anthropic_count_tokens":
            return CountTokensViaTokenize(call, body)
        if tokenize and call.api in ("anthropic_messages", "openai_responses"):
            call.extra[TOKENIZE_FLAG] = True  # filled when the record rolls, off the relay's path
        if call.max_tokens_capped is not None:
            return CappedPassthrough(upstream_path, raw_body)
        return Passthrough(upstream_path, raw_body)

    return choose
