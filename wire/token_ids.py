"""vLLM token ids in Chat Completions responses: take them out for the record, keep them from the client.

With `return_token_ids: true` vLLM adds a top-level `prompt_token_ids` (the first chunk when streaming) and a
per-choice `token_ids` (each chunk's new ids when streaming). Two ways to remove them:

- on parsed dicts: `pop_token_ids` / `read_token_ids` (one response or chunk) and `TokenIdCollector`
  (a whole stream);
- on raw bytes, for native chat passthrough: `strip_token_ids_bytes` and the line-buffered
  `SSETokenIdStripper`, which cut the two fields out of the JSON text without parsing it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

PROMPT_KEY = "prompt_token_ids"
COMPLETION_KEY = "token_ids"


@dataclass(slots=True)
class TokenIds:
    """Ids taken out of one response or chunk: prompt ids, and completion ids per choice index."""

    prompt_token_ids: list[int] | None = None
    by_choice: dict[int, list[int]] = field(default_factory=dict)

    @property
    def completion_token_ids(self) -> list[int] | None:
        """Completion ids of choice 0 (the only choice the agent APIs have)."""
        return self.by_choice.get(0)


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def read_token_ids(body: Mapping[str, Any]) -> TokenIds:
    """`prompt_token_ids` and every `choices[i].token_ids` of a chat response or chunk (nothing changed)."""
    found = TokenIds(prompt_token_ids=_int_list(body.get(PROMPT_KEY)))
    for position, choice in enumerate(body.get("choices") or []):
        if not isinstance(choice, Mapping):
            continue
        ids = _int_list(choice.get(COMPLETION_KEY))
        if ids is not None:
            index = choice.get("index", position)
            found.by_choice[index if isinstance(index, int) else position] = ids
    return found


def pop_token_ids(body: MutableMapping[str, Any]) -> TokenIds:
    """Take `prompt_token_ids` and every `choices[i].token_ids` out of a chat response or chunk (in place)
    and return them. Nothing else is touched."""
    found = read_token_ids(body)
    body.pop(PROMPT_KEY, None)
    for choice in body.get("choices") or []:
        if isinstance(choice, MutableMapping):
            choice.pop(COMPLETION_KEY, None)
    return found


def ask_token_ids(body: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """For a native Chat / Completions request: a copy that asks vLLM for token ids, and whether the client
    asked for them itself (then they must reach it; otherwise strip them from what it receives)."""
    return {**body, "return_token_ids": True}, body.get("return_token_ids") is True


class TokenIdCollector:
    """Accumulates the ids of a streamed chat completion, chunk by chunk."""

    __slots__ = ("by_choice", "prompt_token_ids")

    def __init__(self) -> None:
        self.prompt_token_ids: list[int] | None = None
        self.by_choice: dict[int, list[int]] = {}

    def collect(self, chunk: Mapping[str, Any]) -> None:
        """Record the ids of one chunk (read only; use `pop_token_ids` first to also remove them)."""
        self.add(read_token_ids(chunk))

    def add(self, found: TokenIds) -> None:
        if found.prompt_token_ids is not None and self.prompt_token_ids is None:
            self.prompt_token_ids = found.prompt_token_ids
        for index, ids in found.by_choice.items():
            self.by_choice.setdefault(index, []).extend(ids)

    @property
    def completion_token_ids(self) -> list[int] | None:
        return self.by_choice.get(0)


# A key is matched only with a bare quote on both sides: inside a JSON string every quote is escaped, so
# `"token_ids":` cannot be text from the model. The value is a list of ints (its end is the next `]`) or
# null. One adjacent comma goes with the field: the one before it, or else the one after it.
_MARK = b'token_ids"'
_PROMPT = b'"prompt_'
_WS = b" \t\r\n"


def _field_end(data: bytes, pos: int) -> int:
    """End of `: [...]` / `: null` starting at `pos` (just after the key's closing quote), or -1."""
    n = len(data)
    while pos < n and data[pos] in _WS:
        pos += 1
    if pos >= n or data[pos] != 58:  # ':'
        return -1
    pos += 1
    while pos < n and data[pos] in _WS:
        pos += 1
    if data.startswith(b"null", pos):
        return pos + 4
    if pos < n and data[pos] == 91:  # '['
        close = data.find(b"]", pos)
        return close + 1 if close > 0 else -1
    return -1


def strip_token_ids_bytes(data: bytes) -> bytes:
    """Remove every `"prompt_token_ids": [...]` and `"token_ids": [...]` field from JSON text (a whole
    body, or complete SSE lines). Text without the fields is returned as is, at the cost of one search."""
    hit = data.find(_MARK)
    if hit < 0:
        return data
    pieces: list[bytes] = []
    kept = 0  # data[kept:] is not yet copied
    while hit >= 0:
        if data[hit - 1 : hit] == b'"':
            start = hit - 1
        elif data[hit - 8 : hit] == _PROMPT:
            start = hit - 8
        else:
            hit = data.find(_MARK, hit + 1)
            continue
        end = _field_end(data, hit + len(_MARK))
        if end < 0 or start < kept:
            hit = data.find(_MARK, hit + 1)
            continue
        before = start
        while before > kept and data[before - 1] in _WS:
            before -= 1
        if before > kept and data[before - 1] == 44:  # ',' before the field goes with it
            start = before - 1
        else:
            after = end
            while after < len(data) and data[after] in _WS:
                after += 1
            if after < len(data) and data[after] == 44:  # else the ',' after it
                end = after + 1
        pieces.append(data[kept:start])
        kept = end
        hit = data.find(_MARK, end)
    pieces.append(data[kept:])
    return b"".join(pieces)


class SSETokenIdStripper:
    """`strip_token_ids_bytes` for a byte stream cut at arbitrary points: complete lines pass through at
    once, a partial line waits for its end (SSE events always end with a newline)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> bytes:
        if self._pending:
            data = self._pending + data
            self._pending = b""
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            self._pending = data[cut:]
            data = data[:cut]
        return strip_token_ids_bytes(data) if data else b""

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return strip_token_ids_bytes(rest)
