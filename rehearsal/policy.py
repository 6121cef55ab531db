"""What the brain answers: a whole session scripted from the conversation so far.

The brain keeps no state: a session is recognised by its first user message (the agent's task), which
seeds every draw, and the turn by the number of assistant messages before it. A session of N turns
lists the files, reads and searches the ones the listing named, edits one of them, runs the tests the
task names (after the edit and near the end), and ends with a summary. Every tool call goes to the
shell tool the request offers, in the argument shape that tool's schema asks for, so it runs for real
in the agent's sandbox."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import shlex
from dataclasses import dataclass
from typing import Any

from rehearsal.settings import BrainSettings
from rehearsal.text import filler, final_text, thought
from rehearsal.tokenizer import content_text

SHELL_TOOLS = ("bash", "shell", "exec_command", "shell_command", "run_shell_command", "execute_command")
_TEST_LINE = re.compile(r"^(?:Run the tests with|테스트 실행 방법):\s*(.+)$", re.M)
_PATH = re.compile(r"^[\w./-]+\.\w{1,6}$")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_COMMENT = {"py": "#", "sh": "#", "rb": "#", "toml": "#", "yaml": "#", "yml": "#", "js": "//", "ts": "//"}
_COMMENT |= dict.fromkeys(("go", "rs", "java", "c", "h", "cc", "cpp", "kt", "swift", "cs", "mjs"), "//")


@dataclass(frozen=True)
class Turn:
    """One answer: text, and (except on a session's last turn) one shell call."""

    text: str
    tool: str | None = None
    arguments: dict[str, Any] | None = None

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments or {}, separators=(",", ":"), ensure_ascii=False)


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma)) if sigma else median


def _shell(tools: list[Any] | None) -> tuple[str, dict[str, Any]] | None:
    """The offered shell tool: its name and argument schema (any API's tool shape)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for tool in tools or []:
        spec = tool.get("function", tool) if isinstance(tool, dict) else {}
        name = spec.get("name")
        if isinstance(name, str):
            schema = spec.get("parameters") or spec.get("input_schema") or {}
            found[name.lower()] = (name, schema if isinstance(schema, dict) else {})
    return next((found[n] for n in SHELL_TOOLS if n in found), None)


def _arguments(schema: dict[str, Any], command: str, why: str) -> dict[str, Any]:
    """The command in the shape the tool's schema asks for (a string, or an argv array), required fields filled."""
    props: dict[str, Any] = schema.get("properties") or {}
    key = next((k for k in ("command", "cmd", "script") if k in props), "command")
    kind = props.get(key, {}).get("type")
    args: dict[str, Any] = {key: ["bash", "-lc", command] if "array" in (kind or "") else command}
    for prop in [*(schema.get("required") or []), "description"]:
        if prop in args or prop not in props:
            continue
        spec = props[prop]
        args[prop] = spec.get("default", why if spec.get("type") == "string" else 60000)
    return args


class Script:
    """A session's draws: its length, the text length of each turn, where the edit and test runs fall."""

    def __init__(self, task: str, settings: BrainSettings) -> None:
        digest = hashlib.sha256(f"{settings.seed}:{task}".encode()).digest()
        self.rng = random.Random(int.from_bytes(digest[:8], "big"))
        drawn = round(_lognormal(self.rng, settings.turns_median, settings.turns_sigma))
        self.turns = max(settings.turns_min, min(settings.turns_max, drawn))
        drawn_lengths = (
            round(_lognormal(self.rng, settings.completion_median, settings.completion_sigma))
            for _ in range(self.turns)
        )
        self.lengths = [max(4, min(settings.completion_max, n)) for n in drawn_lengths]
        self.edit_at = max(2, round(self.turns * 0.6))
        self.tests_at = {min(self.turns - 2, self.edit_at + 1), self.turns - 2}
        self.korean = bool(_HANGUL.search(task))
        self.test_command = (m.group(1).strip() if (m := _TEST_LINE.search(task)) else None) or ""


def _files(messages: list[Any]) -> list[str]:
    """Source files named by the session's first tool result (the listing)."""
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "tool":
            lines = content_text(m.get("content")).splitlines()
            return [p.strip() for p in lines if _PATH.match(p.strip()) and not p.startswith(".")][:400]
    return []


def _task(messages: list[dict[str, Any]]) -> str:
    """Every user message before the first answer: the task, with what the agent puts beside it (Codex's
    environment context, Claude Code's reminders) — a constant preamble alone would give every session
    the same script."""
    text = []
    for m in messages:
        if m.get("role") == "assistant":
            break
        if m.get("role") == "user":
            text.append(content_text(m.get("content")))
    return "\n".join(text)


def _command(script: Script, k: int, files: list[str]) -> tuple[str, str]:
    """The shell command of turn k and what it is for."""
    rng = random.Random(script.rng.random() + k)
    if k == 0 or not files:
        return "git ls-files 2>/dev/null | head -200 || find . -type f | head -200", "list the files"
    if k in script.tests_at and script.test_command:
        return f"timeout 120 {script.test_command} 2>&1 | tail -40", "run the tests"
    source = [f for f in files if f.rsplit(".", 1)[-1] in _COMMENT] or files
    if k == script.edit_at:
        path = rng.choice(source)
        mark = _COMMENT.get(path.rsplit(".", 1)[-1], "#")
        line = f"{mark} rehearsal: checked while working on this issue"
        return f"printf '\\n%s\\n' {shlex.quote(line)} >> {shlex.quote(path)} && git diff --stat", "edit"
    path = rng.choice(files)
    choice = rng.random()
    if choice < 0.6:
        start = rng.choice((1, 1, 40, 120))
        return f"sed -n '{start},{start + 119}p' {shlex.quote(path)}", f"read {path}"
    if choice < 0.85:
        word = rng.choice(re.findall(r"[A-Za-z_]{4,}", path) or ["def"])
        return f"grep -rn {shlex.quote(word)} . 2>/dev/null | head -30", f"search for {word}"
    return "git status --short && git diff | head -80", "look at the changes"


def next_turn(messages: list[Any], tools: list[Any] | None, settings: BrainSettings) -> Turn:
    """The answer to a Chat Completions request."""
    msgs = [m for m in messages if isinstance(m, dict)]
    task = _task(msgs)
    script = Script(task, settings)
    k = sum(1 for m in msgs if m.get("role") == "assistant")
    tool = _shell(tools)
    length = script.lengths[min(k, script.turns - 1)]
    if tool is None:  # a side request (a title, a summary, a translation): text only
        return Turn(filler(script.rng, length, script.korean))
    if k >= script.turns - 1:
        return Turn(final_text(script.rng, length, script.korean, k))
    command, why = _command(script, k, _files(msgs))
    return Turn(thought(script.rng, length, script.korean, why), tool[0], _arguments(tool[1], command, why))


def latency_s(settings: BrainSettings, rng: random.Random) -> tuple[float, float]:
    """Seconds to the first token, and per further token."""
    scale = settings.latency_scale / 1000
    ttft = _lognormal(rng, settings.ttft_ms, settings.latency_sigma) * scale
    return ttft, settings.token_ms * scale
