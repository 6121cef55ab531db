"""Call records -> target tokens: stored ids, the render fallback with its usage check, excluded reasons."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lm import Target
from trainer.data.records import Excluded, empty_think_prefix, load_examples, to_example

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "What is in setup.py?"},
]
ASSISTANT = {
    "role": "assistant",
    "content": "Let me look.",
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "setup.py"}'},
        }
    ],
}


def _rendered(
    tiny: Target, messages: list[dict[str, Any]], assistant: dict[str, Any]
) -> tuple[list[int], list[int]]:
    prompt = tiny.render(messages, TOOLS)
    full = tiny.render([*messages, assistant], TOOLS, add_generation_prompt=False)
    end = max(i for i, t in enumerate(full) if t in tiny.stop_token_ids)
    return prompt, full[len(prompt) : end + 1]


def chat_row(tiny: Target, **over: Any) -> dict[str, Any]:
    prompt, completion = _rendered(tiny, MESSAGES, ASSISTANT)
    row = {
        "call_id": "a",
        "session_id": "s",
        "agent": "opencode",
        "api": "openai_chat",
        "model": "tiny-qwen3",
        "status_code": 200,
        "outcome": "ok",
        "tag": None,
        "request_json": json.dumps({"model": "m", "messages": MESSAGES, "tools": TOOLS}),
        "response_json": json.dumps(
            {"choices": [{"message": ASSISTANT, "finish_reason": "tool_calls"}], "usage": {}}
        ),
        "prompt_tokens": len(prompt),
        "completion_tokens": len(completion),
        "prompt_token_ids": None,
        "completion_token_ids": None,
        "finish_reason": "tool_calls",
        "translated": False,
    }
    row.update(over)
    return row


def test_stored_ids_are_used_as_is_and_only_the_completion_is_supervised(tiny: Target) -> None:
    prompt, completion = [1, 2, 3, 4], [10, 11, 12, tiny.stop_token_ids[0]]
    ex = to_example(
        tiny,
        chat_row(
            tiny,
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            prompt_tokens=4,
            completion_tokens=4,
        ),
    )
    assert ex.source == "stored"
    assert ex.prompt_ids == prompt
    assert ex.completion_ids == completion
    assert ex.supervise == [1, 1, 1, 1]


def test_render_fallback_keeps_a_row_whose_lengths_match_the_usage(tiny: Target) -> None:
    ex = to_example(tiny, chat_row(tiny))
    prompt, completion = _rendered(tiny, MESSAGES, ASSISTANT)
    assert ex.source == "rendered"
    assert ex.prompt_ids == prompt
    assert ex.completion_ids == completion
    text = tiny.decode(ex.completion_ids, skip_special_tokens=False)
    assert "<tool_call>" in text
    assert text.endswith("<|im_end|>")
    assert ex.supervise[-1] == 1


def test_render_fallback_drops_rows_whose_usage_disagrees(tiny: Target) -> None:
    row = chat_row(tiny)
    for key, reason in (
        ("prompt_tokens", "prompt_tokens_mismatch"),
        ("completion_tokens", "completion_tokens_mismatch"),
    ):
        with pytest.raises(Excluded, match=reason):
            to_example(tiny, {**row, key: row[key] + 1})
    with pytest.raises(Excluded, match="no_usage"):
        to_example(tiny, {**row, "completion_tokens": None})


def test_an_empty_thinking_block_is_never_supervised(tiny: Target) -> None:
    """Qwen3's template writes `<think>\\n\\n</think>\\n\\n` into the last assistant turn: it is scaffolding."""
    ex = to_example(tiny, chat_row(tiny))
    n = empty_think_prefix(tiny, ex.completion_ids)
    assert n > 0
    assert tiny.decode(ex.completion_ids[:n], skip_special_tokens=False).strip() == "<think>\n\n</think>"
    assert ex.supervise[:n] == [0] * n
    assert all(ex.supervise[n:])
    assert (
        empty_think_prefix(
            tiny, tiny.encode("<think>\nreal thoughts\n</think>\n\nHi", add_special_tokens=False)
        )
        == 0
    )
    assert empty_think_prefix(tiny, tiny.encode("Hello there", add_special_tokens=False)) == 0


def test_anthropic_rows_render_through_the_proxy_translation(tiny: Target) -> None:
    """An Anthropic call and the equivalent Chat call give the same tokens."""
    chat = to_example(tiny, chat_row(tiny))
    request = {
        "model": "m",
        "system": "You are a coding agent.",
        "messages": [{"role": "user", "content": "What is in setup.py?"}],
        "tools": [
            {
                "name": "read_file",
                "description": "Read a file",
                "input_schema": TOOLS[0]["function"]["parameters"],
            }
        ],
    }
    response = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "setup.py"}},
        ],
        "stop_reason": "tool_use",
    }
    row = chat_row(
        tiny,
        api="anthropic_messages",
        request_json=json.dumps(request),
        response_json=json.dumps(response),
        finish_reason="tool_use",
    )
    ex = to_example(tiny, row)
    assert ex.prompt_ids == chat.prompt_ids
    assert ex.completion_ids == chat.completion_ids


def test_translated_rows_render_the_request_actually_sent_upstream(tiny: Target) -> None:
    """The prompt is the Chat body the proxy sent upstream (here it differs from a re-translation of the
    agent's request: another system prompt); the reply, recorded in the agent's API shape as the proxy
    records it, becomes the assistant turn through the translator."""
    upstream = json.dumps({"model": "m", "messages": MESSAGES, "tools": TOOLS})
    tool = {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": TOOLS[0]["function"]["parameters"],
    }
    request = {
        "model": "m",
        "max_tokens": 64,
        "system": "Another system prompt.",
        "messages": [MESSAGES[1]],
        "tools": [tool],
    }
    reply = {
        "type": "message",
        "role": "assistant",
        "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "setup.py"}},
        ],
    }
    row = chat_row(
        tiny,
        api="anthropic_messages",
        translated=True,
        upstream_request_json=upstream,
        request_json=json.dumps(request),
        response_json=json.dumps(reply),
    )
    want = to_example(tiny, chat_row(tiny))
    got = to_example(tiny, row)
    assert got.prompt_ids == want.prompt_ids
    assert got.completion_ids == want.completion_ids


def test_every_excluded_row_is_counted_by_reason(tiny: Target) -> None:
    good = chat_row(tiny)
    rows = [
        good,
        {**good, "tag": "translation"},
        {**good, "outcome": "upstream_error", "status_code": 500},
        {
            **good,
            "prompt_token_ids": [1, 2],
            "completion_token_ids": [10**7, 3],
            "prompt_tokens": 2,
            "completion_tokens": 2,
        },
        {**good, "response_json": "{oops"},
        {**good, "completion_tokens": 1},
        {**good, "api": "weird_api"},
    ]
    examples, report = load_examples(tiny, rows)
    assert len(examples) == 1
    assert report.rows == 7
    assert report.kept == 1
    assert report.excluded == {
        "tagged:translation": 1,
        "not_ok": 1,
        "ids_out_of_vocab": 1,
        "bad_json": 1,
        "completion_tokens_mismatch": 1,
        "unsupported_api:weird_api": 1,
    }


def test_language_comes_from_the_row_or_the_text(tiny: Target) -> None:
    ko = [{"role": "user", "content": "이 파일에 무엇이 있나요?"}]
    prompt, completion = _rendered(tiny, ko, {"role": "assistant", "content": "네."})
    row = chat_row(
        tiny,
        request_json=json.dumps({"messages": ko}),
        response_json=json.dumps({"choices": [{"message": {"role": "assistant", "content": "네."}}]}),
        prompt_tokens=len(prompt),
        completion_tokens=len(completion),
        finish_reason="stop",
    )
    row["request_json"] = json.dumps({"messages": ko, "tools": TOOLS})  # tools do not change the language
    row["prompt_tokens"] = len(tiny.render(ko, TOOLS))
    assert to_example(tiny, row).lang == "ko"
    assert to_example(tiny, chat_row(tiny)).lang == "en"
    assert to_example(tiny, chat_row(tiny, lang="ko")).lang == "ko"


def test_the_mask_never_covers_the_prompt_or_its_scaffolding(tiny: Target) -> None:
    """The killer where a template's assistant mask silently comes back all ones: here the mask comes from
    the prompt/completion boundary, so the whole rendered prompt — the turn header included — is 0."""
    from trainer.data.build import merge_sessions

    ex = to_example(tiny, chat_row(tiny))
    assert tiny.decode(ex.prompt_ids, skip_special_tokens=False).endswith("<|im_start|>assistant\n")
    (seq,) = merge_sessions([ex])
    n = len(ex.prompt_ids)
    assert seq.loss_mask[:n] == [0] * n
    assert 0 < sum(seq.loss_mask) < len(seq.loss_mask)


def test_ids_with_a_redacted_secret_are_kept_though_their_length_differs_from_the_usage(tiny: Target) -> None:
    # The export replaced a secret's tokens by its placeholder's: fewer ids than the usage counted.
    prompt, completion = [1, 2, 3], [10, 11, tiny.stop_token_ids[0]]
    row = chat_row(
        tiny, prompt_token_ids=prompt, completion_token_ids=completion, prompt_tokens=5, completion_tokens=3
    )
    with pytest.raises(Excluded, match="stored_ids_disagree_with_prompt_tokens"):
        to_example(tiny, row)
    ex = to_example(tiny, {**row, "ids_redacted": True})
    assert ex.source == "stored"
    assert ex.prompt_ids == prompt
