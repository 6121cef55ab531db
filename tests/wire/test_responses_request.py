"""Golden tests, field by field: OpenAI Responses request → Chat Completions request."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import TypeAdapter

from tests.wire.vllm import tool_call
from wire import responses_to_chat_request
from wire.responses_request import CUSTOM_TOOL_PARAMETERS, flat_tool_name


def base(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-5-codex", "input": "hi", **fields}


def notes(translated: Any) -> dict[str, tuple[str, str, int]]:
    return {n.path: (n.action, n.detail, n.count) for n in translated.dropped}


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return responses_to_chat_request(body).request["messages"]


def msg(role: str, *texts: str, kind: str = "input_text") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": t} for t in texts]}


def test_string_input_and_instructions() -> None:
    t = responses_to_chat_request(base(instructions="Be terse."))
    assert t.request == {
        "model": "gpt-5-codex",
        "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
        "stream": False,
    }
    assert t.dropped == []


def test_stream_options_and_token_ids() -> None:
    r = responses_to_chat_request(base(stream=True), return_token_ids=True).request
    assert r["stream_options"] == {"include_usage": True}
    assert r["return_token_ids"] is True


def test_sampling_and_limits() -> None:
    r = responses_to_chat_request(base(max_output_tokens=256, temperature=0.1, top_p=0.5)).request
    assert (r["max_tokens"], r["temperature"], r["top_p"]) == (256, 0.1, 0.5)


def test_developer_and_system_messages_lead_as_one_system_message() -> None:
    # Codex sends its system prompt and skills as two developer messages.
    t = responses_to_chat_request(
        base(input=[msg("developer", "prompt"), msg("developer", "skills"), msg("user", "task")])
    )
    assert t.request["messages"] == [
        {"role": "system", "content": "prompt\n\nskills"},
        {"role": "user", "content": "task"},
    ]
    n = notes(t)
    assert n["input[*](role=developer)"] == ("mapped", "sent as a system message", 2)
    assert n["input[*](role=system|developer)"][0] == "mapped"


def test_later_system_message_stays_in_place() -> None:
    body = base(input=[msg("user", "a"), msg("system", "note"), msg("user", "b")])
    assert [m["role"] for m in messages(body)] == ["user", "system", "user"]


def test_message_parts() -> None:
    body = base(
        input=[
            {"role": "user", "content": "easy message"},
            msg("user", "one", "two"),
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAA", "detail": "auto"},
                    {"type": "input_image", "file_id": "file_1"},
                    {"type": "input_file", "file_id": "file_2"},
                ],
            },
        ]
    )
    t = responses_to_chat_request(body)
    assert t.request["messages"] == [
        {"role": "user", "content": "easy message"},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
            ],
        },
    ]
    n = notes(t)
    assert n["input[*](type=message).content[*](type=input_image)"][0] == "dropped"
    assert n["input[*](type=message).content[*](type=input_file)"][0] == "dropped"


def test_function_call_round_as_codex_sends_it() -> None:
    body = base(
        input=[
            msg("user", "make a file"),
            {
                "type": "function_call",
                "status": "completed",
                "id": "fc_1",
                "name": "exec_command",
                "arguments": '{"cmd":"touch a"}',
                "call_id": "call_1",
            },
            {
                "type": "function_call_output",
                "id": "fco_1",
                "call_id": "call_1",
                "output": "Process exited with code 0",
            },
        ]
    )
    t = responses_to_chat_request(body)
    assert t.request["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("call_1", "exec_command", '{"cmd":"touch a"}')],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Process exited with code 0"},
    ]
    n = notes(t)
    assert n["input[*](type=function_call).id"][0] == "dropped"
    assert n["input[*](type=function_call).status"][0] == "dropped"
    assert n["input[*](type=function_call_output).id"][0] == "dropped"


def test_reasoning_text_and_function_calls_make_one_assistant_message() -> None:
    body = base(
        input=[
            msg("user", "go"),
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "sum"}],
                "content": [{"type": "reasoning_text", "text": "full thought"}],
                "encrypted_content": "gAAA",
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Running.", "annotations": []}],
            },
            {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c1"},
            {"type": "function_call", "name": "b", "arguments": "{}", "call_id": "c2"},
            {"type": "function_call_output", "call_id": "c1", "output": "A"},
            {"type": "function_call_output", "call_id": "c2", "output": "B"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only a summary"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
        ]
    )
    t = responses_to_chat_request(body)
    assert t.request["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Running.",
            "reasoning": "full thought",
            "reasoning_content": "full thought",
            "tool_calls": [tool_call("c1", "a", "{}"), tool_call("c2", "b", "{}")],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {
            "role": "assistant",
            "content": "Done.",
            "reasoning": "only a summary",
            "reasoning_content": "only a summary",
        },
    ]
    n = notes(t)
    assert n["input[*](type=reasoning).encrypted_content"][0] == "dropped"
    assert n["input[*](type=reasoning).summary"][0] in ("dropped", "mapped")


def test_text_after_tool_calls_starts_a_new_assistant_message() -> None:
    body = base(
        input=[
            {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c1"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "after"}]},
        ]
    )
    out = messages(body)
    assert [(m["role"], m.get("content"), len(m.get("tool_calls", []))) for m in out] == [
        ("assistant", None, 1),
        ("assistant", "after", 0),
    ]


def test_function_call_output_parts_and_images() -> None:
    body = base(
        input=[
            {"type": "function_call", "name": "view_image", "arguments": "{}", "call_id": "c"},
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [
                    {"type": "input_text", "text": "here"},
                    {"type": "input_image", "image_url": "data:image/png;base64,BBB"},
                ],
            },
            msg("user", "and?"),
        ]
    )
    t = responses_to_chat_request(body)
    assert t.request["messages"][1:] == [
        {"role": "tool", "tool_call_id": "c", "content": "here"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,BBB"}},
                {"type": "text", "text": "and?"},
            ],
        },
    ]
    assert notes(t)["input[*](type=function_call_output).output[*](type=input_image)"][0] == "mapped"


def test_function_tools_flat_to_nested() -> None:
    params = {
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
        "additionalProperties": False,
    }
    t = responses_to_chat_request(
        base(
            tools=[
                {
                    "type": "function",
                    "name": "exec_command",
                    "description": "Run",
                    "strict": False,
                    "parameters": params,
                }
            ]
        )
    )
    assert t.request["tools"] == [
        {
            "type": "function",
            "function": {"name": "exec_command", "description": "Run", "parameters": params, "strict": False},
        }
    ]
    assert t.request["tool_choice"] == "auto"
    TypeAdapter(list[ChatCompletionToolParam]).validate_python(t.request["tools"])


def test_namespace_tools_are_flattened() -> None:
    inner = {
        "type": "function",
        "name": "close_agent",
        "description": "Close",
        "strict": False,
        "parameters": {"type": "object"},
    }
    t = responses_to_chat_request(
        base(
            tools=[
                {"type": "namespace", "name": "multi_agent_v1", "description": "agents", "tools": [inner]}
            ],
            input=[
                {
                    "type": "function_call",
                    "namespace": "multi_agent_v1",
                    "name": "close_agent",
                    "arguments": "{}",
                    "call_id": "c",
                }
            ],
        )
    )
    assert t.request["tools"][0]["function"]["name"] == "multi_agent_v1__close_agent"
    assert t.request["messages"][0]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__close_agent"
    n = notes(t)
    assert n["tools[*](type=namespace)"][0] == "mapped"
    assert n["input[*](type=function_call).namespace"][0] == "mapped"
    assert flat_tool_name("mcp__srv__", "tool") == "mcp__srv__tool"


def test_custom_tools_become_functions_with_one_string_input() -> None:
    t = responses_to_chat_request(
        base(
            tools=[
                {
                    "type": "custom",
                    "name": "apply_patch",
                    "description": "Patch",
                    "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"},
                }
            ],
            input=[
                {
                    "type": "custom_tool_call",
                    "name": "apply_patch",
                    "input": "*** Begin Patch",
                    "call_id": "p",
                },
                {"type": "custom_tool_call_output", "call_id": "p", "output": "ok"},
            ],
        )
    )
    assert t.request["tools"] == [
        {
            "type": "function",
            "function": {"name": "apply_patch", "description": "Patch", "parameters": CUSTOM_TOOL_PARAMETERS},
        }
    ]
    assert (
        t.request["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{"input": "*** Begin Patch"}'
    )
    assert t.request["messages"][1] == {"role": "tool", "tool_call_id": "p", "content": "ok"}
    n = notes(t)
    assert n["tools[*](type=custom)"][0] == "mapped"
    assert n["tools[*](type=custom).format"][0] == "dropped"


@pytest.mark.parametrize(
    "kind", ["web_search", "file_search", "local_shell", "image_generation", "code_interpreter", "mcp"]
)
def test_hosted_tools_are_dropped(kind: str) -> None:
    t = responses_to_chat_request(
        base(tools=[{"type": kind}, {"type": "function", "name": "f", "parameters": {}}])
    )
    assert [x["function"]["name"] for x in t.request["tools"]] == ["f"]
    assert notes(t)[f"tools[*](type={kind})"][0] == "dropped"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"type": "function", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
        (
            {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]},
            "required",
        ),
        ({"type": "web_search"}, "auto"),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    body = base(tools=[{"type": "function", "name": "f", "parameters": {}}], tool_choice=choice)
    assert responses_to_chat_request(body).request["tool_choice"] == expected


def test_parallel_tool_calls_mapped() -> None:
    body = base(tools=[{"type": "function", "name": "f", "parameters": {}}], parallel_tool_calls=False)
    t = responses_to_chat_request(body)
    assert t.request["parallel_tool_calls"] is False
    assert notes(t)["parallel_tool_calls"][0] == "mapped"


def test_text_format() -> None:
    schema = {"type": "object", "properties": {}}
    t = responses_to_chat_request(
        base(
            text={
                "format": {"type": "json_schema", "name": "x", "schema": schema, "strict": True},
                "verbosity": "low",
            }
        )
    )
    assert t.request["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": schema, "strict": True},
    }
    assert notes(t)["text.verbosity"][0] == "dropped"
    assert "response_format" not in responses_to_chat_request(base(text={"format": {"type": "text"}})).request


def test_reasoning_options() -> None:
    t = responses_to_chat_request(base(reasoning={"effort": "medium", "summary": "auto"}))
    assert t.request["reasoning_effort"] == "medium"
    n = notes(t)
    assert n["reasoning.effort"][0] == "mapped"
    assert n["reasoning.summary"][0] == "dropped"
    assert "reasoning_effort" not in responses_to_chat_request(base(reasoning={"effort": "minimal"})).request


@pytest.mark.parametrize(
    "field",
    [
        "store",
        "include",
        "metadata",
        "prompt_cache_key",
        "service_tier",
        "truncation",
        "user",
        "previous_response_id",
        "client_metadata",
        "something_new",
    ],
)
def test_fields_a_chat_upstream_cannot_take_are_dropped_and_reported(field: str) -> None:
    t = responses_to_chat_request(base(**{field: "x"}))
    assert field not in t.request
    assert notes(t)[field][0] == "dropped"


def test_translated_messages_are_valid_openai_chat() -> None:
    body = base(
        instructions="sys",
        input=[
            msg("user", "go"),
            {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]},
            {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": "A"},
        ],
    )
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages(body))
