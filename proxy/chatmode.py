"""Exchanges that change bytes: vLLM token ids on Chat Completions, and translation to a Chat upstream.

Each is one small class; `exchange_factory(settings)` picks one per call from what the call's API shape
(`wire.shapes`) offers. Translation state (the stream translators) lives in `wire`; these classes only wire it
to the relay.
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
from wire import API_SHAPES, Api, ApiShape, SSETokenIdStripper, Translated, shape_of, strip_token_ids_bytes
from wire.stream_base import ChatStreamTranslator

CHAT_PATH = API_SHAPES[Api.CHAT].path


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
    _stream: ChatStreamTranslator

    def __init__(self, call: Call, shape: ApiShape, translated: Translated, request: dict[str, Any]) -> None:
        self.shape = shape
        self.family = shape.family  # the client's error shape
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


class ViaChat(_Translating):
    """A Messages or Responses call (any shape with translators) sent to a Chat-only upstream."""

    def __init__(self, call: Call, shape: ApiShape, body: dict[str, Any], return_token_ids: bool) -> None:
        if shape.to_chat is None or shape.from_chat is None or shape.stream is None:
            raise ValueError(f"{shape.api} has no translation to Chat")  # chosen only for a shape that has
        super().__init__(call, shape, shape.to_chat(body, return_token_ids=return_token_ids), body)
        self._stream = shape.stream(body)
        self._from_chat = shape.from_chat

    def _from_upstream(self, reply: dict[str, Any]) -> dict[str, Any]:
        return self._from_chat(reply, self.request)


class CountTokensViaTokenize(_Translating):
    """`count_tokens` answered from the upstream's `/tokenize` (vLLM, the CPU stand-in); never streamed."""

    upstream_path = "/tokenize"

    def __init__(self, call: Call, shape: ApiShape, body: dict[str, Any]) -> None:
        if shape.tokenize is None or shape.from_tokenize is None:
            raise ValueError(f"{shape.api} is not answered from /tokenize")  # chosen only for one that is
        super().__init__(call, shape, shape.tokenize(body), body)
        self._from_tokenize = shape.from_tokenize

    def _is_answer(self, reply: dict[str, Any]) -> bool:
        return "count" in reply or "tokens" in reply

    def _from_upstream(self, reply: dict[str, Any]) -> dict[str, Any]:
        return self._from_tokenize(reply)


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
        shape = shape_of(call.api)
        if shape is None:
            return Passthrough(upstream_path, raw_body)
        if shape.token_ids and ids and "return_token_ids" not in body:
            return ChatTokenIds(upstream_path, body)
        if chat_mode and shape.to_chat:
            return ViaChat(call, shape, body, ids)
        if chat_mode and shape.from_tokenize:
            return CountTokensViaTokenize(call, shape, body)
        if tokenize and shape.fills_prompt_ids:
            call.extra[TOKENIZE_FLAG] = True  # filled when the record rolls, off the relay's path
        if call.max_tokens_capped is not None:
            return CappedPassthrough(upstream_path, raw_body)
        return Passthrough(upstream_path, raw_body)

    return choose
