"""How each agent talks to its model, as the rehearsal agent speaks it: Claude Code's Anthropic Messages,
Codex's OpenAI Responses, OpenCode's Chat Completions — streamed, with each CLI's User-Agent and session
header, a shell tool in each API's own shape — so a rehearsal sends the proxy the mix of APIs (and its
translation work) a real campaign does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from records.agents import AgentName
from wire import API_SHAPES, Api

SYSTEM = (
    "You are a coding agent working in a checkout of a repository. Use the shell tool to look at files, "
    "edit them and run the tests. Work on your own until the issue is resolved, then summarise."
)
_COMMAND = {"type": "string", "description": "The shell command to run."}
_WHY = {"type": "string", "description": "What the command is for, in a few words."}


@dataclass(frozen=True)
class Step:
    """One assistant turn as the agent reads it: its text and its shell call, if any."""

    text: str
    call_id: str | None = None
    command: str | None = None
    raw: Any = None  # what the agent appends to its history (the API's own assistant items)


def _command(arguments: Any) -> str:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments or {}
    cmd = args.get("command") or args.get("cmd") or ""
    return " ".join(cmd[2:] if cmd[:2] == ["bash", "-lc"] else cmd) if isinstance(cmd, list) else str(cmd)


class Dialect:
    api: Api
    user_agent: str
    session_header: str

    def __init__(self, model: str, task: str) -> None:
        self.model, self.history = model, self.start(task)

    @property
    def path(self) -> str:
        return API_SHAPES[self.api].path

    def start(self, task: str) -> list[Any]:
        raise NotImplementedError

    def request(self) -> dict[str, Any]:
        raise NotImplementedError

    def read(self, body: dict[str, Any]) -> Step:
        raise NotImplementedError

    def answer(self, step: Step, output: str) -> None:
        raise NotImplementedError

    def headers(self, session: str) -> dict[str, str]:
        return {"user-agent": self.user_agent, self.session_header: session}

    def assemble(self, data: bytes) -> dict[str, Any] | None:
        """The stream as its whole reply; None when it ended with an error event (the proxy's "could not record
        this call; retry" among them), which a CLI's SDK raises on, whatever came before it."""
        assembled = API_SHAPES[self.api].assemble(data, is_stream=True)
        return None if assembled.errors else assembled.body


class Messages(Dialect):
    api, user_agent, session_header = Api.MESSAGES, "claude-cli/2.0.0 (rehearsal)", "x-claude-code-session-id"

    def start(self, task: str) -> list[Any]:
        return [{"role": "user", "content": [{"type": "text", "text": task}]}]

    def request(self) -> dict[str, Any]:
        schema = {
            "type": "object",
            "properties": {"command": _COMMAND, "description": _WHY},
            "required": ["command"],
        }
        tool = {"name": "Bash", "description": "Run a shell command.", "input_schema": schema}
        return {
            "model": self.model,
            "max_tokens": 32000,
            "system": [{"type": "text", "text": SYSTEM}],
            "messages": self.history,
            "tools": [tool],
            "stream": True,
        }

    def read(self, body: dict[str, Any]) -> Step:
        blocks = body.get("content") or []
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        use = next((b for b in blocks if b.get("type") == "tool_use"), None)
        if use is None:
            return Step(text, raw=blocks)
        return Step(text, use["id"], _command(use.get("input")), blocks)

    def answer(self, step: Step, output: str) -> None:
        result = {"type": "tool_result", "tool_use_id": step.call_id, "content": output}
        self.history += [{"role": "assistant", "content": step.raw}, {"role": "user", "content": [result]}]


class Responses(Dialect):
    api, user_agent, session_header = Api.RESPONSES, "codex_cli_rs/0.50.0 (rehearsal)", "session-id"

    def start(self, task: str) -> list[Any]:
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]}]

    def request(self) -> dict[str, Any]:
        argv = {"type": "array", "items": {"type": "string"}, "description": "The command and its arguments."}
        params = {
            "type": "object",
            "properties": {"command": argv, "workdir": {"type": "string"}},
            "required": ["command"],
        }
        tool = {
            "type": "function",
            "name": "shell",
            "description": "Run a command.",
            "parameters": params,
            "strict": False,
        }
        return {
            "model": self.model,
            "instructions": SYSTEM,
            "input": self.history,
            "tools": [tool],
            "tool_choice": "auto",
            "stream": True,
            "store": False,
        }

    def read(self, body: dict[str, Any]) -> Step:
        items = body.get("output") or []
        text = "".join(
            c.get("text", "")
            for i in items
            if i.get("type") == "message"
            for c in i.get("content") or []
            if c.get("type") == "output_text"
        )
        call = next((i for i in items if i.get("type") == "function_call"), None)
        if call is None:
            return Step(text, raw=items)
        return Step(text, call["call_id"], _command(call.get("arguments")), items)

    def answer(self, step: Step, output: str) -> None:
        self.history += [
            *step.raw,
            {"type": "function_call_output", "call_id": step.call_id, "output": output},
        ]


class Chat(Dialect):
    api, user_agent, session_header = Api.CHAT, "opencode/0.15.0 (rehearsal)", "x-session-id"

    def start(self, task: str) -> list[Any]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]

    def request(self) -> dict[str, Any]:
        params = {
            "type": "object",
            "properties": {"command": _COMMAND, "description": _WHY},
            "required": ["command", "description"],
        }
        tool = {
            "type": "function",
            "function": {"name": "bash", "description": "Run a shell command.", "parameters": params},
        }
        return {
            "model": self.model,
            "messages": self.history,
            "tools": [tool],
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    def read(self, body: dict[str, Any]) -> Step:
        message = (body.get("choices") or [{}])[0].get("message") or {}
        calls = message.get("tool_calls") or []
        raw = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
        if not calls:
            return Step(message.get("content") or "", raw=raw)
        fn = calls[0].get("function") or {}
        return Step(message.get("content") or "", calls[0].get("id"), _command(fn.get("arguments")), raw)

    def answer(self, step: Step, output: str) -> None:
        self.history += [step.raw, {"role": "tool", "tool_call_id": step.call_id, "content": output}]


DIALECTS: dict[AgentName, type[Dialect]] = {
    AgentName.CLAUDE_CODE: Messages,
    AgentName.CODEX: Responses,
    AgentName.OPENCODE: Chat,
}
