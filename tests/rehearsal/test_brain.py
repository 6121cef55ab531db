"""The scripted brain: a session's script (length, order of actions, the tool's argument shape) and its wire
(token ids that add up, vLLM's `return_token_ids` layout, the rehearsal header on every answer, 400s)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from records.tags import REHEARSAL_HEADER
from rehearsal.policy import Script, next_turn
from rehearsal.server import create_app
from rehearsal.settings import BrainSettings
from rehearsal.tokenizer import encode, render
from wire import sse

TASK = "Resolve the issue.\nRun the tests with: python3 -m unittest -v\n\nIssue #3: wrap() drops words"
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command", "description"],
        },
    },
}
LISTING = "README.md\ntextkit/core.py\ntests/test_core.py\n"


def session(settings: BrainSettings, tools: list[Any] | None = None) -> list[Any]:
    """Play a whole session against the policy: every tool call answered, until the brain stops calling."""
    messages: list[Any] = [{"role": "system", "content": "sys"}, {"role": "user", "content": TASK}]
    turns = []
    while len(turns) < 100:
        turn = next_turn(messages, tools or [BASH], settings)
        turns.append(turn)
        if turn.tool is None:
            return turns
        call = {
            "id": f"c{len(turns)}",
            "type": "function",
            "function": {"name": turn.tool, "arguments": turn.arguments_json},
        }
        messages += [
            {"role": "assistant", "content": turn.text, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": LISTING if len(turns) == 1 else "ok"},
        ]
    raise AssertionError("the brain never stopped")


def test_a_session_lists_reads_edits_tests_and_ends_with_a_summary() -> None:
    settings = BrainSettings(turns_min=12, turns_max=12)
    turns = session(settings)
    commands = [t.arguments["command"] for t in turns if t.arguments]
    assert len(turns) == 12
    assert turns[-1].tool is None
    assert turns[-1].text.startswith("Done after 11 steps")
    assert commands[0].startswith("git ls-files")
    edits = [c for c in commands if ">>" in c]
    assert len(edits) == 1
    assert "textkit/core.py" in edits[0] or "tests/test_core.py" in edits[0]
    tests = [i for i, c in enumerate(commands) if "python3 -m unittest -v" in c]
    assert tests
    assert max(tests) == len(commands) - 1
    assert all(t.arguments["description"] for t in turns if t.arguments)  # required by this tool's schema


def test_the_script_hangs_on_the_task_and_the_seed_alone() -> None:
    a, b = BrainSettings(seed=1), BrainSettings(seed=2)
    assert [t.text for t in session(a)] == [t.text for t in session(a)]
    lengths = {Script(f"task {i}", a).turns for i in range(200)}
    assert min(lengths) >= a.turns_min
    assert max(lengths) <= a.turns_max
    assert len(lengths) > 10
    assert Script(TASK, a).lengths != Script(TASK, b).lengths


@pytest.mark.parametrize(
    ("schema", "key", "shape"),
    [
        ({"properties": {"command": {"type": "array", "items": {"type": "string"}}}}, "command", list),
        (
            {
                "properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}},
                "required": ["cmd"],
            },
            "cmd",
            str,
        ),
    ],
)
def test_the_command_takes_the_shape_the_tool_asks_for(schema: dict[str, Any], key: str, shape: type) -> None:
    tool = {
        "type": "function",
        "function": {"name": "exec_command" if key == "cmd" else "shell", "parameters": schema},
    }
    turn = session(BrainSettings(turns_min=6, turns_max=6), [tool])[0]
    assert isinstance(turn.arguments[key], shape)
    assert "git ls-files" in str(turn.arguments[key])


def test_a_request_without_a_shell_gets_text() -> None:
    turn = next_turn([{"role": "user", "content": "Write a title"}], None, BrainSettings())
    assert turn.tool is None
    assert turn.text


async def _post(app_client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await app_client.post("/v1/chat/completions", json=body)


async def test_whole_and_streamed_answers_carry_ids_that_add_up() -> None:
    app = create_app(BrainSettings(latency_scale=0, turns_min=8, turns_max=8))
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": TASK}],
        "tools": [BASH],
        "return_token_ids": True,
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://brain") as c:
        whole = (await _post(c, body)).json()
        streamed = await _post(c, {**body, "stream": True, "stream_options": {"include_usage": True}})
        tokenized = (await c.post("/tokenize", json={"messages": body["messages"], "tools": [BASH]})).json()
    assert streamed.headers[REHEARSAL_HEADER]
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "bash"
    assert whole["prompt_token_ids"] == tokenized["tokens"] == render(body["messages"], [BASH])
    assert whole["usage"]["completion_tokens"] == len(choice["token_ids"])
    events = sse.json_events(streamed.content)
    ids = [i for e in events for ch in e.get("choices", []) for i in ch.get("token_ids", [])]
    assert events[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert events[-1]["usage"]["completion_tokens"] == len(ids) == len(choice["token_ids"])
    args = "".join(
        tc["function"].get("arguments", "")
        for e in events
        for ch in e.get("choices", [])
        for tc in ch["delta"].get("tool_calls", [])
    )
    assert json.loads(args) == json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])


async def test_bad_requests_are_400s_and_still_marked() -> None:
    app = create_app(BrainSettings(latency_scale=0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://brain") as c:
        bad_json = await c.post("/v1/chat/completions", content=b"{not json")
        no_messages = await _post(c, {"model": "m"})
        models = await c.get("/v1/models")
    assert bad_json.status_code == no_messages.status_code == 400
    assert "messages" in no_messages.json()["error"]["message"]
    assert bad_json.headers[REHEARSAL_HEADER]
    assert models.headers[REHEARSAL_HEADER]
    assert models.json()["data"][0]["max_model_len"] >= 16384


def test_the_tokenizer_counts_like_a_subword_vocabulary() -> None:
    text = "def wrap(words, width):\n    return [w for w in words if len(w) <= width]\n"
    assert len(text) / 5 < len(encode(text)) < len(text) / 1.5
    assert len(encode("한국어 번역")) == 6  # a syllable each, and the space


async def test_each_prompt_extends_the_last_with_its_answer() -> None:
    """As a real template renders a model's own answer back: the export then merges a session's calls into
    one training sequence, as it would for a real target."""
    app = create_app(BrainSettings(latency_scale=0, turns_min=6, turns_max=6))
    messages: list[Any] = [{"role": "user", "content": TASK}]
    seen: list[int] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://brain") as c:
        for i in range(4):
            r = (await _post(c, {"messages": messages, "tools": [BASH], "return_token_ids": True})).json()
            assert r["prompt_token_ids"][: len(seen)] == seen, f"call {i} does not extend the last"
            seen = r["prompt_token_ids"] + r["choices"][0]["token_ids"]
            message = r["choices"][0]["message"]
            call = message["tool_calls"][0]
            messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": LISTING}]
