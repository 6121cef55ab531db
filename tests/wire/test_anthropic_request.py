"""Golden tests, field by field: Anthropic Messages request → Chat Completions request."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import TypeAdapter

from tests.wire.vllm import tool_call
from wire import anthropic_to_chat_request


def base(**fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


def assistant_turn(*blocks: dict[str, Any], user: str = "x") -> dict[str, Any]:
    """A request ending in the assistant's content `blocks`, after the user's text."""
    return base(messages=[{"role": "user", "content": user}, {"role": "assistant", "content": list(blocks)}])


def notes(translated: Any) -> dict[str, tuple[str, str, int]]:
    return {n.path: (n.action, n.detail, n.count) for n in translated.dropped}


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return anthropic_to_chat_request(body).request["messages"]


def test_minimal_request() -> None:
    t = anthropic_to_chat_request(base())
    assert t.request == {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1024,
        "stream": False,
    }
    assert t.dropped == []


def test_stream_sets_include_usage_and_token_ids_on_request() -> None:
    t = anthropic_to_chat_request(base(stream=True), return_token_ids=True)
    assert t.request["stream"] is True
    assert t.request["stream_options"] == {"include_usage": True}
    assert t.request["return_token_ids"] is True
    assert t.stream
    assert "return_token_ids" not in anthropic_to_chat_request(base(stream=True)).request


def test_model_override_is_reported() -> None:
    t = anthropic_to_chat_request(base(), model="Qwen/Qwen3-8B")
    assert t.request["model"] == "Qwen/Qwen3-8B"
    assert notes(t)["model"][0] == "mapped"


def test_sampling_fields() -> None:
    t = anthropic_to_chat_request(base(temperature=0.2, top_p=0.9, top_k=20, stop_sequences=["</x>", "END"]))
    r = t.request
    assert (r["temperature"], r["top_p"], r["top_k"], r["stop"]) == (0.2, 0.9, 20, ["</x>", "END"])
    assert notes(t)["top_k"][0] == "mapped"


def test_system_string() -> None:
    assert messages(base(system="Be brief."))[0] == {"role": "system", "content": "Be brief."}


def test_system_blocks_join_and_drop_cache_control_and_billing_header() -> None:
    body = base(
        system=[
            {
                "type": "text",
                "text": "x-anthropic-billing-header: cc_version=2.1.332.e1c; cc_entrypoint=sdk-cli;",
            },
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "\nBe careful."},
        ]
    )
    t = anthropic_to_chat_request(body)
    assert t.request["messages"][0] == {"role": "system", "content": "You are Claude Code.\nBe careful."}
    n = notes(t)
    assert n["system[*].cache_control"][0] == "dropped"
    assert n["system[*].text"][0] == "dropped"
    kept = anthropic_to_chat_request(body, keep_billing_header=True).request["messages"][0]["content"]
    assert kept.startswith("x-anthropic-billing-header")


def test_leading_system_message_joins_the_system_prompt() -> None:
    body = base(
        system="Top.", messages=[{"role": "system", "content": "Inline."}, {"role": "user", "content": "hi"}]
    )
    t = anthropic_to_chat_request(body)
    assert t.request["messages"] == [
        {"role": "system", "content": "Top.\n\nInline."},
        {"role": "user", "content": "hi"},
    ]
    assert notes(t)["messages[*](role=system)"][0] == "mapped"


def test_system_message_inside_messages_stays_in_place() -> None:
    # Claude Code sends its environment block as messages[1], after the first user message.
    body = base(
        system="Top.",
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "system", "content": "# Environment"},
        ],
    )
    assert messages(body) == [
        {"role": "system", "content": "Top."},
        {"role": "user", "content": "task"},
        {"role": "system", "content": "# Environment"},
    ]


def test_system_message_between_tool_use_and_result_moves_after_the_results() -> None:
    body = base(
        messages=[
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
            {"role": "system", "content": "reminder"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ]
    )
    t = anthropic_to_chat_request(body)
    assert [m["role"] for m in t.request["messages"]] == ["user", "assistant", "tool", "system"]
    assert notes(t)["messages[*](role=system)"][1] == "moved after the tool results it interrupted"


def test_user_text_blocks_single_and_multiple() -> None:
    one = messages(base(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}]}]))
    assert one == [{"role": "user", "content": "a"}]
    two = messages(
        base(
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
            ]
        )
    )
    assert two == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]


def test_image_blocks_become_image_url_parts() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
        {"type": "text", "text": "what is this?"},
    ]
    t = anthropic_to_chat_request(base(messages=[{"role": "user", "content": content}]))
    assert t.request["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "what is this?"},
    ]
    assert notes(t)["messages[*].content[*](type=image).source"][0] == "dropped"


def test_documents() -> None:
    content = [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "file body"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}},
    ]
    t = anthropic_to_chat_request(base(messages=[{"role": "user", "content": content}]))
    assert t.request["messages"][0]["content"] == "file body"
    assert notes(t)["messages[*].content[*](type=document)"][0] in ("mapped", "dropped")
    assert {n.action for n in t.dropped if n.path == "messages[*].content[*](type=document)"} == {
        "mapped",
        "dropped",
    }


def test_assistant_tool_use_becomes_tool_calls() -> None:
    body = assistant_turn(
        {"type": "text", "text": "Listing."},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls -la"}},
        {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "ü.txt"}},
        user="list files",
    )
    assistant = messages(body)[1]
    assert assistant == {
        "role": "assistant",
        "content": "Listing.",
        "tool_calls": [
            tool_call("toolu_1", "Bash", '{"command": "ls -la"}'),
            tool_call("toolu_2", "Read", '{"path": "ü.txt"}'),
        ],
    }


def test_assistant_only_tool_use_has_null_content() -> None:
    body = assistant_turn({"type": "tool_use", "id": "t", "name": "f", "input": {}})
    assert messages(body)[1]["content"] is None


def test_thinking_blocks_become_reasoning_and_signature_is_dropped() -> None:
    body = assistant_turn(
        {"type": "thinking", "thinking": "step 1. ", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "thinking", "thinking": "step 2.", "signature": "sig"},
        {"type": "text", "text": "answer"},
    )
    t = anthropic_to_chat_request(body)
    assistant = t.request["messages"][1]
    assert assistant["reasoning_content"] == assistant["reasoning"] == "step 1. step 2."
    assert assistant["content"] == "answer"
    n = notes(t)
    assert n["messages[*].content[*](type=thinking).signature"][2] == 2
    assert n["messages[*].content[*](type=redacted_thinking)"][0] == "dropped"


def test_tool_results_in_order_then_trailing_text() -> None:
    body = base(
        messages=[
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                    {"type": "tool_use", "id": "b", "name": "g", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "string result"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "b",
                        "content": [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "<system-reminder>keep going</system-reminder>"},
                ],
            },
        ]
    )
    t = anthropic_to_chat_request(body)
    assert t.request["messages"][2:] == [
        {"role": "tool", "tool_call_id": "a", "content": "string result"},
        {"role": "tool", "tool_call_id": "b", "content": "line 1\nline 2"},
        {"role": "user", "content": "<system-reminder>keep going</system-reminder>"},
    ]
    assert notes(t)["messages[*].content[*](type=tool_result).is_error"][0] == "dropped"


def test_tool_result_cache_control_and_false_is_error_as_claude_code_sends() -> None:
    block = {
        "tool_use_id": "t",
        "type": "tool_result",
        "content": "(Bash completed with no output)",
        "is_error": False,
        "cache_control": {"type": "ephemeral"},
    }
    t = anthropic_to_chat_request(base(messages=[{"role": "user", "content": [block]}]))
    assert t.request["messages"] == [
        {"role": "tool", "tool_call_id": "t", "content": "(Bash completed with no output)"}
    ]
    assert set(notes(t)) == {"messages[*].content[*].cache_control"}


def test_tool_result_images_move_to_a_user_message_after_the_tool_messages() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
    body = base(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "a",
                        "content": [{"type": "text", "text": "see"}, image],
                    },
                    {"type": "tool_result", "tool_use_id": "b", "content": "plain"},
                ],
            }
        ]
    )
    t = anthropic_to_chat_request(body)
    assert t.request["messages"] == [
        {"role": "tool", "tool_call_id": "a", "content": "see"},
        {"role": "tool", "tool_call_id": "b", "content": "plain"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}],
        },
    ]
    assert notes(t)["messages[*].content[*](type=tool_result).content[*](type=image)"][0] == "mapped"


def test_text_before_tool_results_keeps_its_place() -> None:
    body = base(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "before"},
                    {"type": "tool_result", "tool_use_id": "a", "content": "r"},
                    {"type": "text", "text": "after"},
                ],
            }
        ]
    )
    assert [(m["role"], m["content"]) for m in messages(body)] == [
        ("user", "before"),
        ("tool", "r"),
        ("user", "after"),
    ]


def test_tools_input_schema_to_parameters() -> None:
    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    tools = [
        {
            "name": "Bash",
            "description": "Run a command",
            "input_schema": schema,
            "cache_control": {"type": "ephemeral"},
        },
        {"name": "NoDesc", "input_schema": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "Typed", "input_schema": schema, "strict": True},
    ]
    t = anthropic_to_chat_request(base(tools=tools))
    assert t.request["tools"] == [
        {
            "type": "function",
            "function": {"name": "Bash", "description": "Run a command", "parameters": schema},
        },
        {
            "type": "function",
            "function": {"name": "NoDesc", "parameters": {"type": "object", "properties": {}}},
        },
        {"type": "function", "function": {"name": "Typed", "parameters": schema, "strict": True}},
    ]
    assert t.request["tool_choice"] == "auto"
    TypeAdapter(list[ChatCompletionToolParam]).validate_python(t.request["tools"])
    assert notes(t)["tools[*].cache_control"][0] == "dropped"


def test_server_tools_are_dropped() -> None:
    tools = [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        {"type": "bash_20250124", "name": "bash"},
        {"name": "Keep", "input_schema": {"type": "object"}},
    ]
    t = anthropic_to_chat_request(base(tools=tools))
    assert [x["function"]["name"] for x in t.request["tools"]] == ["Keep"]
    n = notes(t)
    assert n["tools[*](type=web_search_20250305)"][0] == "dropped"
    assert n["tools[*](type=bash_20250124)"][0] == "dropped"


def test_deferred_tools_hidden_until_tool_search_loads_them() -> None:
    tools = [
        {"name": "ToolSearch", "input_schema": {"type": "object"}},
        {"name": "DeferredToolPlaceholder", "input_schema": {"type": "object"}, "defer_loading": True},
        {"name": "mcp__slack__send", "input_schema": {"type": "object"}, "defer_loading": True},
    ]
    t = anthropic_to_chat_request(base(tools=tools))
    assert [x["function"]["name"] for x in t.request["tools"]] == ["ToolSearch"]
    assert notes(t)["tools[*](defer_loading=true)"] == (
        "dropped",
        "deferred tool not shown to the model until tool search loads it, as Anthropic does",
        2,
    )
    loaded = base(
        tools=tools,
        messages=[
            {"role": "user", "content": "send"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "s", "name": "ToolSearch", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "s",
                        "content": [{"type": "tool_reference", "tool_name": "mcp__slack__send"}],
                    }
                ],
            },
        ],
    )
    t = anthropic_to_chat_request(loaded)
    assert [x["function"]["name"] for x in t.request["tools"]] == ["ToolSearch", "mcp__slack__send"]
    assert t.request["tools"][1]["function"].keys() == {"name", "parameters"}
    n = notes(t)
    deferred = {(x.action, x.count) for x in t.dropped if x.path == "tools[*](defer_loading=true)"}
    assert deferred == {("dropped", 1), ("mapped", 1)}  # the placeholder stays hidden
    assert n["messages[*].content[*](type=tool_result).content[*](type=tool_reference)"][0] == "dropped"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "Bash"}, {"type": "function", "function": {"name": "Bash"}}),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}]
    assert anthropic_to_chat_request(base(tools=tools, tool_choice=choice)).request["tool_choice"] == expected


def test_disable_parallel_tool_use() -> None:
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}]
    t = anthropic_to_chat_request(
        base(tools=tools, tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    )
    assert t.request["parallel_tool_calls"] is False
    assert notes(t)["tool_choice.disable_parallel_tool_use"][0] == "mapped"


def test_tool_choice_without_tools_is_dropped() -> None:
    t = anthropic_to_chat_request(base(tool_choice={"type": "any"}))
    assert "tool_choice" not in t.request
    assert notes(t)["tool_choice"][0] == "dropped"


@pytest.mark.parametrize(
    ("thinking", "enable"),
    [
        ({"type": "enabled", "budget_tokens": 4096}, True),
        ({"type": "adaptive", "display": "updates"}, True),
        ({"type": "disabled"}, False),
    ],
)
def test_thinking_maps_to_enable_thinking(thinking: dict[str, Any], enable: bool) -> None:
    t = anthropic_to_chat_request(base(thinking=thinking))
    assert t.request["chat_template_kwargs"] == {"enable_thinking": enable}
    n = notes(t)
    assert n[f"thinking(type={thinking['type']})"][0] == "mapped"
    if "budget_tokens" in thinking:
        assert n["thinking.budget_tokens"][0] == "dropped"
    if "display" in thinking:
        assert n["thinking.display"][0] == "dropped"


def test_client_chat_template_kwargs_are_kept() -> None:
    t = anthropic_to_chat_request(base(thinking={"type": "enabled"}, chat_template_kwargs={"custom": 1}))
    assert t.request["chat_template_kwargs"] == {"custom": 1, "enable_thinking": True}


def test_output_config() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    t = anthropic_to_chat_request(
        base(output_config={"effort": "high", "format": {"type": "json_schema", "schema": schema}})
    )
    assert t.request["reasoning_effort"] == "high"
    assert t.request["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
    t = anthropic_to_chat_request(base(output_config={"effort": "max"}))
    assert "reasoning_effort" not in t.request
    assert notes(t)["output_config.effort"][0] == "dropped"


@pytest.mark.parametrize(
    "field",
    ["metadata", "context_management", "service_tier", "container", "mcp_servers", "some_future_field"],
)
def test_fields_a_chat_upstream_cannot_take_are_dropped_and_reported(field: str) -> None:
    t = anthropic_to_chat_request(base(**{field: {"x": 1}}))
    assert field not in t.request
    assert notes(t)[field][0] == "dropped"


def test_every_translated_message_is_valid_openai_chat() -> None:
    body = base(
        system="s",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t"},
                    {"type": "tool_use", "id": "1", "name": "f", "input": {"x": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "1", "content": "r"},
                    {"type": "text", "text": "next"},
                ],
            },
        ],
    )
    msgs = messages(body)
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(msgs)
    json.dumps(msgs)


def test_dropped_json_is_plain_data() -> None:
    t = anthropic_to_chat_request(base(metadata={"user_id": "u"}))
    assert t.dropped_json() == [
        {
            "path": "metadata",
            "action": "dropped",
            "detail": "request metadata (user id) is not sent upstream",
            "count": 1,
        }
    ]


def test_input_is_not_mutated() -> None:
    body = base(
        system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "system", "content": "lead"}, {"role": "user", "content": "hi"}],
        tools=[{"name": "f", "input_schema": {"type": "object"}, "defer_loading": True}],
    )
    before = json.dumps(body, sort_keys=True)
    anthropic_to_chat_request(body)
    assert json.dumps(body, sort_keys=True) == before
