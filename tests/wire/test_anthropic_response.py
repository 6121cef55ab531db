"""Golden tests: Chat Completions response (non-streaming) → Anthropic message."""

from __future__ import annotations

import pytest

from tests.wire.vllm import chat_response, tool_call
from wire import chat_to_anthropic_message


def test_text_response() -> None:
    msg = chat_to_anthropic_message(chat_response({"content": "Hello."}), {"model": "claude-sonnet-4-5"})
    assert msg == {
        "id": "msg_9f1c2e",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Hello."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 120,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 30,
        },
    }


def test_model_falls_back_to_upstream_and_id_can_be_given() -> None:
    msg = chat_to_anthropic_message(chat_response({"content": "x"}), message_id="msg_given")
    assert (msg["model"], msg["id"]) == ("Qwen/Qwen3-8B", "msg_given")


@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
def test_reasoning_becomes_a_thinking_block_first(key: str) -> None:
    msg = chat_to_anthropic_message(chat_response({key: "Think.", "content": "Done."}))
    thinking, text = msg["content"]
    assert thinking["type"] == "thinking"
    assert thinking["thinking"] == "Think."
    assert thinking["signature"]
    assert text == {"type": "text", "text": "Done."}


def test_tool_calls_become_tool_use_blocks() -> None:
    message = {
        "content": None,
        "tool_calls": [
            tool_call("chatcmpl-tool-a", "Bash", '{"command": "ls"}'),
            tool_call("chatcmpl-tool-b", "Read", "not json"),
        ],
    }
    msg = chat_to_anthropic_message(chat_response(message, "tool_calls"))
    assert msg["content"] == [
        {"type": "tool_use", "id": "chatcmpl-tool-a", "name": "Bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "chatcmpl-tool-b", "name": "Read", "input": {}},
    ]
    assert msg["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("finish", "vllm_stop", "tool", "expected"),
    [
        ("stop", None, False, ("end_turn", None)),
        ("stop", 151645, False, ("end_turn", None)),
        ("stop", "</answer>", False, ("stop_sequence", "</answer>")),
        ("length", None, False, ("max_tokens", None)),
        ("tool_calls", None, True, ("tool_use", None)),
        ("stop", None, True, ("tool_use", None)),
        ("content_filter", None, False, ("refusal", None)),
        ("abort", None, False, ("end_turn", None)),
    ],
)
def test_stop_reasons(finish: str, vllm_stop: object, tool: bool, expected: tuple[str, str | None]) -> None:
    message: dict[str, object] = {"content": "x"}
    if tool:
        message["tool_calls"] = [tool_call("c", "f", "{}")]
    msg = chat_to_anthropic_message(chat_response(message, finish, choice={"stop_reason": vllm_stop}))
    assert (msg["stop_reason"], msg["stop_sequence"]) == expected


def test_cached_prompt_tokens_are_cache_reads() -> None:
    chat = chat_response({"content": "x"})
    chat["usage"]["prompt_tokens_details"] = {"cached_tokens": 100}
    assert chat_to_anthropic_message(chat)["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 100,
        "output_tokens": 30,
    }


def test_token_ids_never_reach_the_message() -> None:
    chat = chat_response({"content": "x"}, prompt_token_ids=[1, 2], choice={"token_ids": [3]})
    assert "token_ids" not in str(chat_to_anthropic_message(chat))


def test_empty_response_has_no_blocks() -> None:
    assert chat_to_anthropic_message(chat_response({"content": ""}))["content"] == []
