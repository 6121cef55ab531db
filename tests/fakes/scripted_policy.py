"""What the scripted model answers, independent of wire format.

The scripted upstream stands in for the target model (a GPU vLLM cannot run here). Its whole "policy":
when a request offers a shell-like tool and holds no tool result yet, call that tool once to create
``AGENT_PROOF.txt``; otherwise answer with short text. Model names (or the ``x-scripted-fault`` header)
switch on a benchmark mode and fault injection for proxy tests.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

PROOF_FILE = "AGENT_PROOF.txt"
PROOF_TEXT = "made by the scripted model"
PROOF_COMMAND = f"printf '{PROOF_TEXT}\\n' > {PROOF_FILE}"
FINAL_TEXT = f"Done: the scripted model created {PROOF_FILE}."
SIDE_TEXT = "Scripted reply"
FAULT_HEADER = "x-scripted-fault"

# Tool names the CLIs (and common agents) give their shell tool; compared case-insensitively.
SHELL_TOOL_NAMES = (
    "bash",
    "shell",
    "exec_command",
    "local_shell",
    "shell_command",
    "run_shell_command",
    "execute_command",
    "run_terminal_cmd",
    "terminal",
)


@dataclass(frozen=True)
class ShellTool:
    """A shell tool as offered by the request: its name, wire kind and the schema of its arguments."""

    name: str
    kind: str  # "function" (JSON arguments) or "local_shell" (Responses built-in)
    schema: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    kind: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclass(frozen=True)
class Reply:
    """One scripted answer: either a list of text deltas or a single tool call."""

    text_deltas: tuple[str, ...] = ()
    tool_call: ToolCall | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_deltas)


@dataclass(frozen=True)
class Behaviour:
    """Switches parsed from the model name and/or the fault header."""

    bench_chunks: int | None = None
    drop_after: int | None = None
    slow_ms: int = 0
    status: int | None = None
    compress: str | None = None  # gzip, br or zstd: compress the response body (streams flush per chunk)


_COMPRESS = re.compile(r"compress-(gzip|br|zstd)")
_SWITCHES = {
    "bench_chunks": re.compile(r"bench-(\d+)"),
    "drop_after": re.compile(r"drop-after-(\d+)"),
    "slow_ms": re.compile(r"slow-(\d+)"),
    "status": re.compile(r"status-(\d{3})"),
}


def parse_behaviour(model: str | None, fault_header: str | None = None) -> Behaviour:
    """Read ``bench-N``, ``drop-after-N``, ``slow-MS``, ``status-CODE``, ``compress-ENC`` in model or header."""
    found: dict[str, Any] = {}
    for source in (model or "", fault_header or ""):
        for key, pattern in _SWITCHES.items():
            match = pattern.search(source)
            if match:
                found[key] = int(match.group(1))
        compress = _COMPRESS.search(source)
        if compress:
            found["compress"] = compress.group(1)
    return Behaviour(**found)


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def pick_shell_tool(tools: list[dict[str, Any]] | None) -> ShellTool | None:
    """Find the shell tool in any API's tools list (Anthropic, Responses or Chat Completions shape)."""
    by_name: dict[str, ShellTool] = {}
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "local_shell":
            by_name["local_shell"] = ShellTool("local_shell", "local_shell")
            continue
        spec: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name")
        if not isinstance(name, str):
            continue
        schema = spec.get("input_schema") or spec.get("parameters") or {}
        by_name[name.lower()] = ShellTool(name, "function", schema if isinstance(schema, dict) else {})
    for wanted in SHELL_TOOL_NAMES:
        if wanted in by_name:
            return by_name[wanted]
    return None


def _filler(prop: str, spec: dict[str, Any]) -> Any:
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if "default" in spec:
        return spec["default"]
    if spec.get("enum"):
        return spec["enum"][0]
    if kind == "string":
        return "Create the proof file" if "desc" in prop.lower() else "."
    if kind in ("integer", "number"):
        return 60000 if "timeout" in prop.lower() else 1
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    return {}


def shell_arguments(tool: ShellTool) -> dict[str, Any]:
    """Build the tool's arguments from its own schema: command string, argv array or ``cmd``."""
    if tool.kind == "local_shell":
        return {"type": "exec", "command": ["bash", "-lc", PROOF_COMMAND]}
    props: dict[str, Any] = tool.schema.get("properties") or {}
    key = next((k for k in ("command", "cmd", "commands", "script") if k in props), "command")
    spec = props.get(key, {"type": "string"})
    kind = spec.get("type")
    args: dict[str, Any] = {
        key: ["bash", "-lc", PROOF_COMMAND] if kind == "array" or "array" in (kind or []) else PROOF_COMMAND
    }
    for prop in tool.schema.get("required") or []:
        if prop not in args:
            args[prop] = _filler(prop, props.get(prop, {}))
    if "description" in props and "description" not in args:
        args["description"] = "Create the proof file"
    return args


def decide(tools: list[dict[str, Any]] | None, has_tool_result: bool) -> Reply:
    """The scripted turn: one shell call first, text after a tool result or when no shell is offered."""
    if has_tool_result:
        return Reply(text_deltas=_split(FINAL_TEXT))
    tool = pick_shell_tool(tools)
    if tool is None:
        return Reply(text_deltas=_split(SIDE_TEXT))
    call = ToolCall(new_id("call_"), tool.name, tool.kind, shell_arguments(tool))
    return Reply(text_deltas=(), tool_call=call)


def bench_reply(chunks: int) -> Reply:
    return Reply(text_deltas=("tok ",) * chunks)


def _split(text: str) -> tuple[str, ...]:
    """Split text into a few word-sized deltas so streams have several content chunks."""
    parts = re.findall(r"\S+\s*", text)
    return tuple(parts) or (text,)


# --- a deterministic stand-in tokenizer: one token per UTF-8 byte ---------------------------------------


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def render_chat(messages: list[Any], tools: list[Any] | None, add_generation_prompt: bool = True) -> str:
    """A ChatML-like rendering of a Chat Completions prompt; /tokenize and prompt_token_ids agree on it."""
    parts = []
    if tools:
        parts.append("<|im_start|>tools\n" + json.dumps(tools, sort_keys=True) + "<|im_end|>\n")
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        body = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
        extra = {k: v for k, v in message.items() if k not in ("role", "content")}
        if extra:
            body += json.dumps(extra, sort_keys=True)
        parts.append(f"<|im_start|>{message.get('role')}\n{body}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def count_text_tokens(value: Any) -> int:
    """Token count of any JSON value under the byte tokenizer (used for usage on non-chat APIs)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return len(text.encode("utf-8"))
