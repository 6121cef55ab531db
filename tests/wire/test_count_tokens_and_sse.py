"""`count_tokens` → vLLM `/tokenize`, and the incremental chat SSE decoder."""

from __future__ import annotations

from wire import (
    anthropic_to_chat_request,
    count_tokens_to_tokenize_request,
    responses_to_chat_request,
    responses_to_tokenize_request,
    tokenize_to_count_tokens,
)
from wire.sse import DONE, SSEDecoder


def test_count_tokens_builds_a_tokenize_request_rendering_the_same_prompt() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "count me"}],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 1000},
    }
    t = count_tokens_to_tokenize_request(body)
    chat = anthropic_to_chat_request({**body, "max_tokens": 10, "stream": True}).request
    assert t.request == {
        "model": "claude-sonnet-4-5",
        "messages": chat["messages"],
        "add_generation_prompt": True,
        "tools": chat["tools"],
        "chat_template_kwargs": {"enable_thinking": True},
    }
    paths = {n.path for n in t.dropped}
    assert {"system[*].cache_control", "thinking.budget_tokens", "(chat).tool_choice"} <= paths


def test_count_tokens_model_override_and_no_tools() -> None:
    t = count_tokens_to_tokenize_request(
        {"model": "claude", "messages": [{"role": "user", "content": "x"}]}, model="qwen"
    )
    assert t.request == {
        "model": "qwen",
        "messages": [{"role": "user", "content": "x"}],
        "add_generation_prompt": True,
    }


def test_responses_tokenize_request() -> None:
    body = {
        "model": "gpt",
        "instructions": "sys",
        "input": "hi",
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "tool_choice": "auto",
        "store": False,
    }
    t = responses_to_tokenize_request(body)
    chat = responses_to_chat_request(body).request
    assert t.request == {
        "model": "gpt",
        "messages": chat["messages"],
        "add_generation_prompt": True,
        "tools": chat["tools"],
    }
    assert {"store", "(chat).tool_choice"} <= {n.path for n in t.dropped}


def test_tokenize_reply_to_count_tokens() -> None:
    assert tokenize_to_count_tokens({"count": 12345, "max_model_len": 40960, "tokens": [1, 2]}) == {
        "input_tokens": 12345
    }
    assert tokenize_to_count_tokens({"tokens": [1, 2, 3]}) == {"input_tokens": 3}
    assert tokenize_to_count_tokens({}) == {"input_tokens": 0}


def test_sse_decoder_handles_splits_crlf_comments_and_done() -> None:
    raw = b': keep-alive\r\n\r\ndata: {"a":1}\r\n\r\ndata: {"b":\ndata: 2}\n\nevent: x\ndata: [DONE]\n\n'
    for step in (1, 3, len(raw)):
        decoder = SSEDecoder()
        items: list[object] = []
        for i in range(0, len(raw), step):
            items += decoder.feed(raw[i : i + step])
        items += decoder.flush()
        assert items == [{"a": 1}, {"b": 2}, DONE]


def test_sse_decoder_skips_malformed_and_flushes_unterminated_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: not json\n\ndata: [1]\n\ndata: {"c":3}') == []
    assert decoder.flush() == [{"c": 3}]
    assert decoder.malformed == 2
