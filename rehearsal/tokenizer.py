"""The brain's tokenizer: deterministic, about as many tokens as a BPE vocabulary gives for code and prose
(English words in pieces of up to five letters, one token per Hangul syllable, runs of spaces together),
so the prompt and completion lengths a rehearsal measures are of the right order. Ids are hashes: the
brain renders and counts, it never needs to decode."""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

IM_START, IM_END, TOOL_START, TOOL_END = 1, 2, 3, 4
VOCAB = 49_152
_FIRST_ID = 100  # below: the special ids above
_PIECE = re.compile(r"[A-Za-z]{1,5}|[0-9]{1,3}|[ \t]{1,8}|\n|.", re.S)


def encode(text: str) -> list[int]:
    return [_FIRST_ID + zlib.crc32(p.encode()) % (VOCAB - _FIRST_ID) for p in _PIECE.findall(text)]


def count(text: str) -> int:
    return len(_PIECE.findall(text))


def content_text(content: Any) -> str:
    """The text of a message's content, whichever shape it has."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # parts: [{"type": "text", "text": …}, …]
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else json.dumps(content, sort_keys=True)


def render(messages: list[Any], tools: list[Any] | None, add_generation_prompt: bool = True) -> list[int]:
    """A ChatML-like rendering of a Chat Completions prompt; /tokenize and prompt_token_ids agree on it."""
    ids: list[int] = []
    if tools:
        ids += [IM_START, *encode("tools\n" + json.dumps(tools, sort_keys=True)), IM_END]
    for message in messages:
        if not isinstance(message, dict):
            continue
        body = content_text(message.get("content"))
        for call in message.get("tool_calls") or []:
            body += "\n" + json.dumps(call.get("function", call), sort_keys=True)
        ids += [IM_START, *encode(f"{message.get('role')}\n{body}"), IM_END]
    if add_generation_prompt:
        ids += [IM_START, *encode("assistant\n")]
    return ids
