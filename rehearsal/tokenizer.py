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


def tool_call_ids(name: str, arguments: Any) -> list[int]:
    """What the brain emits for a tool call (`<tool_call>{name, arguments}</tool_call>`, as hermes parses),
    and how a later prompt renders it back: the same ids, so a session's prompts extend each other."""
    spoken = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return [TOOL_START, *encode(spoken), TOOL_END]


def _assistant(message: dict[str, Any]) -> list[int]:
    """An earlier answer exactly as it was generated: the generation prompt, the text, the tool calls."""
    ids = [IM_START, *encode("assistant\n"), *encode(content_text(message.get("content")))]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        raw = fn.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            arguments = raw
        ids += tool_call_ids(str(fn.get("name")), arguments)
    return [*ids, IM_END]


def render(messages: list[Any], tools: list[Any] | None, add_generation_prompt: bool = True) -> list[int]:
    """A ChatML-like rendering of a Chat Completions prompt; /tokenize and prompt_token_ids agree on it, and
    an answer renders back as the ids it was generated as."""
    ids: list[int] = []
    if tools:
        ids += [IM_START, *encode("tools\n" + json.dumps(tools, sort_keys=True)), IM_END]
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            ids += _assistant(message)
            continue
        body = content_text(message.get("content"))
        ids += [IM_START, *encode(f"{message.get('role')}\n{body}"), IM_END]
    if add_generation_prompt:
        ids += [IM_START, *encode("assistant\n")]
    return ids
