"""The chat view: every captured agent request (Claude Code and OpenCode on Anthropic Messages, Codex on
Responses, OpenCode on Chat) is published as the Chat conversation the target saw — typed structs a reader
uses without JSON parsing — and the export's check renders the view read back from Parquet with the real
Qwen chat template and finds the prompt ids the target made (here made by the stand-in server's own path:
the proxy's translation, vLLM's normalisation, the template), and counts a call whose ids differ."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from factory.publish.export import export
from wire import shape_of
from wire.chat_view import normalize_message, typed_messages

from .test_export_ids import AGENTS, capture, finished_sessions, qwen_dir, write_parts

pytestmark = pytest.mark.slow  # a real tokenizer and an export (≈ 10 s)

API = {
    "/v1/messages": "anthropic_messages",
    "/v1/responses": "openai_responses",
    "/v1/chat/completions": "openai_chat",
}
REPLY = {
    "anthropic_messages": {
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
        ],
        "role": "assistant",
    },
    "openai_chat": {"choices": [{"message": {"role": "assistant", "content": "Looking."}}]},
}


def served(tok, chat: dict) -> list[int]:
    """The prompt ids a server makes of a Chat body: vLLM's normalisation, the template, no special tokens."""
    text = tok.apply_chat_template(
        [normalize_message(m) for m in chat["messages"]],
        tools=chat.get("tools") or None,
        add_generation_prompt=True,
        tokenize=False,
    )
    return tok(text, add_special_tokens=False)["input_ids"]


def rows(tok, done) -> tuple[list[dict], dict[str, dict]]:
    out, chats = [], {}
    for n, (cap, agent) in enumerate(
        (c, a)
        for c, a in (
            ("claude-code", "claude-code"),
            ("codex", "codex"),
            ("opencode", "opencode"),
            ("opencode-anthropic", "opencode"),
        )
        for _ in [0]
    ):
        sess = next(s for s in done if s.agent == agent and (cap != "opencode-anthropic" or s.lang == "ko"))
        for k, f in enumerate(sorted(p.name for p in (AGENTS / cap).glob("*_request.json"))):
            body, api = capture(cap, f)["body"], API[capture(cap, f)["path"]]
            chat = body if api == "openai_chat" else dict(shape_of(api).to_chat(body).request)
            t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=100 * n + k)
            cid = f"{sess.proxy_session_id}-{n}{k}"
            chats[cid] = chat
            out.append(
                {
                    "call_id": cid,
                    "session_id": sess.proxy_session_id,
                    "agent": agent,
                    "api": api,
                    "method": "POST",
                    "path": "/v1/x",
                    "model": "qwen-target",
                    "stream": False,
                    "status_code": 200,
                    "outcome": "ok",
                    "request_json": json.dumps(body),
                    "translated": api != "openai_chat",
                    "upstream_request_json": None if api == "openai_chat" else json.dumps(chat),
                    "response_json": json.dumps(REPLY.get(api, {"output": []})),
                    "started_at": t,
                    "finished_at": t,
                    "prompt_token_ids": served(tok, chat),
                    "completion_token_ids": [9, 9],
                    "prompt_tokens": None,
                    "completion_tokens": 2,
                    "token_ids_source": "upstream",
                }
            )
    out[-1]["prompt_token_ids"] = [*out[-1]["prompt_token_ids"], 0]  # ids the view does not give back
    return out, chats


def test_the_chat_view_is_typed_and_renders_to_the_recorded_ids(tmp_path) -> None:
    tok = AutoTokenizer.from_pretrained(qwen_dir())
    sessions, done = finished_sessions(tmp_path)
    calls, chats = rows(tok, done)
    write_parts(tmp_path, calls)
    stats = export(sessions, tmp_path / "data", tmp_path / "ds", tokenizer=qwen_dir(), chat_check_calls=1000)
    assert stats.chat_views == len(calls)
    check = stats.chat_check
    assert check is not None
    assert (check["checked"], check["equal"]) == (len(calls), len(calls) - 1), check
    assert set(check["by_agent"]) == {"claude-code", "codex", "opencode"}
    card = (tmp_path / "ds" / "README.md").read_text()
    assert f"exactly on {len(calls) - 1:,} of {len(calls):,} sampled calls" in card

    traj_table = pq.read_table(tmp_path / "ds" / "data" / "trajectories")
    message = traj_table.schema.field("chat_messages").type.value_type
    assert pa.types.is_struct(message)
    assert message.get_field_index("tool_calls") >= 0
    traj = {t["trajectory_id"]: t for t in traj_table.to_pylist()}
    got = pq.read_table(tmp_path / "ds" / "data" / "calls").to_pylist()
    for c in got:
        t = traj[c["trajectory_id"]]
        view = t["chat_messages"][: c["chat_prefix"]] + c["chat_tail"]
        assert view == typed_messages(chats[c["call_id"]]["messages"]), c["call_id"]
        tools = c["tools"] if c["tools"] is not None else t["tools"]
        assert [x["function"]["name"] for x in tools or []] == [
            x["function"]["name"] for x in chats[c["call_id"]].get("tools") or []
        ]
    claude = [c for c in got if c["agent"] == "claude-code"]
    assert all(c["chat_reply"]["tool_calls"][0]["function"]["name"] == "Bash" for c in claude)
    assert all(
        json.loads(c["chat_reply"]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
        for c in claude
    )
