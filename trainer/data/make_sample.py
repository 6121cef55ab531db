"""Generate the bundled sample of call records: the CPU target answering agent-like sessions.

``python -m trainer.data.make_sample --target smollm2`` writes ``trainer/data/sample/<target>/calls.parquet``
in the proxy's call-record schema (plus the ``repo`` and ``language`` columns the factory's export adds).
Each session is a coding-agent conversation — a long system prompt with tool descriptions, a task on a
small repository, then tool output (file contents, test runs, diffs) fed back turn after turn — in the
three shapes the proxy records:

- ``claude-code``: Anthropic Messages, translated to Chat by the proxy, token ids from the target;
- ``codex``: OpenAI Responses, translated likewise;
- ``opencode``: Chat Completions, most with token ids, some without (the trainer re-renders those and
  keeps them only when the lengths match the usage).

A quarter of the sessions are in Korean, spread over the repositories. One tagged row and one failed call show the exclusions.
``make train`` uses the sample only when ``make harvest`` has produced no data yet.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from records import SCHEMA
from standin import load_target
from standin.engine import Engine, SamplingParams
from wire import (
    anthropic_to_chat_request,
    chat_to_anthropic_message,
    chat_to_anthropic_request,
    chat_to_responses_request,
    chat_to_responses_response,
    responses_to_chat_request,
)

SAMPLE_DIR = Path(__file__).parent / "sample"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]},
        },
    }
    for name, desc, arg in (
        ("read_file", "Read a file from the repository and return its contents.", "path"),
        ("bash", "Run a shell command in the repository and return stdout and stderr.", "command"),
        ("edit_file", "Replace the contents of a file with new text.", "path"),
        ("grep", "Search the repository for a regular expression.", "pattern"),
    )
]

SYSTEMS = {
    "claude-code": (
        "You are Claude Code, an interactive CLI coding agent. You help the user with software engineering "
        "tasks in their repository. Use the tools to read files, run commands and edit code. Keep answers "
        "short and precise. Before editing, read the file. After editing, run the tests. Never invent file "
        "contents. When you call a tool, say which tool and why in one sentence.\n\nTools: read_file(path), "
        "bash(command), edit_file(path, content), grep(pattern)."
    ),
    "codex": (
        "You are Codex, a coding agent running in a terminal. You are working in a git repository. Follow the "
        "user's instructions, inspect the code with shell commands, make minimal changes and verify them with "
        "the project's tests. Report what you changed as a short summary with file paths.\n\nAvailable "
        "commands: read_file, bash, edit_file, grep."
    ),
    "opencode": (
        "You are opencode, an AI coding assistant. You operate in the user's project directory. Prefer small, "
        "correct changes. Explain your plan first, then act with the tools: read_file to view files, bash to "
        "run commands, edit_file to write changes, grep to search. Answer in the user's language."
    ),
}

REPOS = [
    ("acme/textparse", "src/textparse/split.py", 'def split_words(s):\n    return s.split(" ")\n'),
    ("acme/calc", "calc/ops.py", "def divide(a, b):\n    return a / b\n"),
    ("lumen/http-retry", "retry/backoff.py", "def delay(attempt):\n    return 2 ** attempt\n"),
    (
        "lumen/csvkit-lite",
        "csvlite/read.py",
        "def read_rows(path):\n    return open(path).read().split('\\n')\n",
    ),
    ("hanbit/todo-api", "app/routes.py", "@app.get('/todos')\ndef list_todos():\n    return db.all()\n"),
    (
        "hanbit/kv-store",
        "kv/store.py",
        "class Store:\n    def get(self, key):\n        return self.data[key]\n",
    ),
    ("oak/geometry", "geometry/shapes.py", "def area(r):\n    return 3.14 * r * r\n"),
    (
        "oak/dates",
        "dates/parse.py",
        "def parse(s):\n    y, m, d = s.split('-')\n    return int(y), int(m), int(d)\n",
    ),
    (
        "pine/markdown-toc",
        "toc/build.py",
        "def headings(md):\n    return [l for l in md.splitlines() if l.startswith('#')]\n",
    ),
    ("pine/slugify", "slugify/core.py", "def slugify(s):\n    return s.lower().replace(' ', '-')\n"),
    (
        "river/cache",
        "cache/lru.py",
        "class LRU:\n    def __init__(self, n):\n        self.n = n\n        self.d = {}\n",
    ),
    ("river/cli-args", "cliargs/parse.py", "def parse(argv):\n    return dict(a.split('=') for a in argv)\n"),
]

TASKS_EN = [
    "The tests in {test} fail. Find the bug in {path} and fix it.",
    "Add a docstring and type hints to the function in {path}.",
    "Handle the empty-input case in {path} and add a test for it.",
    "Explain what {path} does and suggest one improvement.",
]
TASKS_KO = [
    "{test}의 테스트가 실패합니다. {path}의 버그를 찾아서 고쳐 주세요.",
    "{path}의 함수에 독스트링과 타입 힌트를 추가해 주세요.",
    "{path}에서 빈 입력을 처리하고 테스트를 추가해 주세요.",
]
FOLLOW_EN = [
    "Tool result (read_file {path}):\n```python\n{code}```\nWhat should change?",
    "Tool result (bash `pytest -q {test}`):\n```\nF.\n=== FAILURES ===\nAssertionError: expected 3, got 2\n1 failed, 1 passed in 0.04s\n```\nContinue.",
    "Tool result (bash `git diff`):\n```diff\n--- a/{path}\n+++ b/{path}\n@@ -1,2 +1,3 @@\n+# checked\n{code}```\nIs this diff correct? Then run the tests.",
    "Tool result (grep 'def '):\n```\n{path}:1:{first}\n```\nNow write the fix.",
]
FOLLOW_KO = [
    "도구 결과 (read_file {path}):\n```python\n{code}```\n무엇을 바꿔야 하나요?",
    "도구 결과 (bash `pytest -q {test}`):\n```\n1 failed, 1 passed in 0.04s\n```\n계속해 주세요.",
]


def _session(rng: random.Random, i: int) -> dict[str, Any]:
    agent = ("claude-code", "codex", "opencode")[i % 3]
    # ten repositories with two sessions each: agent, language and repository vary independently, so a
    # held-out repository is not also a held-out language
    repo, path, code = REPOS[i % 10]
    korean = i % 4 == 3
    test = "tests/test_" + Path(path).stem + ".py"
    fmt = {"path": path, "code": code, "test": test, "first": code.splitlines()[0]}
    task = rng.choice(TASKS_KO if korean else TASKS_EN).format(**fmt)
    follows = [f.format(**fmt) for f in rng.sample(FOLLOW_KO if korean else FOLLOW_EN, 2)]
    return {
        "agent": agent,
        "repo": repo,
        "language": "ko" if korean else "en",
        "task": task,
        "follows": follows,
    }


def _api_request(agent: str, chat: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """(api, the body the agent sends, the Chat body the proxy sends upstream when it translates)."""
    if agent == "claude-code":
        body = chat_to_anthropic_request(chat)
        return "anthropic_messages", body, anthropic_to_chat_request(body, return_token_ids=True).request
    if agent == "codex":
        body = chat_to_responses_request(chat)
        return "openai_responses", body, responses_to_chat_request(body, return_token_ids=True).request
    return "openai_chat", chat, None


def _api_response(api: str, chat_response: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    if api == "anthropic_messages":
        return chat_to_anthropic_message(chat_response, request)
    if api == "openai_responses":
        return chat_to_responses_response(chat_response, request)
    return chat_response


def generate(target_name: str, sessions: int, calls: int, max_tokens: int, seed: int) -> list[dict[str, Any]]:
    target = load_target(target_name)
    engine = Engine(target)
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    clock = 1_767_225_600.0  # 2026-01-01
    for i in range(sessions):
        s = _session(rng, i)
        session_id = uuid.UUID(int=rng.getrandbits(128)).hex
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEMS[s["agent"]]},
            {"role": "user", "content": s["task"]},
        ]
        for c in range(calls):
            chat = {"model": target_name, "messages": [dict(m) for m in messages], "tools": TOOLS}
            api, body, upstream = _api_request(s["agent"], chat)
            sent: dict[str, Any] = upstream or chat
            prompt = target.render(
                sent["messages"], sent.get("tools"), chat_template_kwargs=sent.get("chat_template_kwargs")
            )
            params = SamplingParams(
                max_tokens=max_tokens, temperature=0.7, top_p=0.9, seed=rng.getrandbits(31)
            )
            t0 = time.monotonic()
            steps = list(engine.steps(prompt, params))
            completion = [t for st in steps for t in st.token_ids]
            finish = steps[-1].finish_reason or "length"
            text = target.decode([t for t in completion if t not in target.stop_token_ids])
            chat_response = {
                "id": f"chatcmpl-{uuid.UUID(int=rng.getrandbits(128)).hex[:24]}",
                "object": "chat.completion",
                "created": int(clock),
                "model": target_name,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                ],
                "usage": {
                    "prompt_tokens": len(prompt),
                    "completion_tokens": len(completion),
                    "total_tokens": len(prompt) + len(completion),
                },
            }
            with_ids = api != "openai_chat" or (i + c) % 3 != 0  # some OpenCode calls carry no ids
            rows.append(
                {
                    "call_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                    "session_id": session_id,
                    "agent": s["agent"],
                    "tag": None,
                    "api": api,
                    "method": "POST",
                    "path": {"anthropic_messages": "/v1/messages", "openai_responses": "/v1/responses"}.get(
                        api, "/v1/chat/completions"
                    ),
                    "model": target_name,
                    "stream": False,
                    "status_code": 200,
                    "outcome": "ok",
                    "request_json": json.dumps(body, ensure_ascii=False),
                    "upstream_request_json": json.dumps(upstream, ensure_ascii=False) if upstream else None,
                    "response_json": json.dumps(_api_response(api, chat_response, body), ensure_ascii=False),
                    "started_at": clock,
                    "finished_at": clock + time.monotonic() - t0,
                    "prompt_tokens": len(prompt),
                    "completion_tokens": len(completion),
                    "prompt_token_ids": prompt if with_ids else None,
                    "completion_token_ids": completion if with_ids else None,
                    "token_ids_source": "upstream" if with_ids else None,
                    "finish_reason": finish,
                    "translated": upstream is not None,
                    "repo": s["repo"],
                    "lang": s["language"],
                }
            )
            clock += 30.0
            messages.append({"role": "assistant", "content": text})
            if c < len(s["follows"]):
                messages.append({"role": "user", "content": s["follows"][c]})
            else:
                messages.append({"role": "user", "content": "Thanks. Summarise the change in one sentence."})
        print(f"session {i + 1}/{sessions} ({s['agent']}, {s['language']}): {calls} calls", flush=True)
    # what the trainer must leave out: a proxy-internal translation probe and a failed call
    probe = dict(rows[0], call_id=uuid.UUID(int=rng.getrandbits(128)).hex, tag="translation")
    failed = dict(
        rows[1],
        call_id=uuid.UUID(int=rng.getrandbits(128)).hex,
        status_code=500,
        outcome="upstream_error",
        prompt_token_ids=None,
        completion_token_ids=None,
    )
    return [*rows, probe, failed]


CHAT_PROMPTS = [
    "What is the capital of Australia?",
    "Write a short poem about the sea.",
    "Explain photosynthesis in simple terms.",
    "Give me three tips for better sleep.",
    "What is the difference between weather and climate?",
    "Summarise the plot of Romeo and Juliet.",
    "How do vaccines work?",
    "Suggest a name for a coffee shop.",
    "What are the planets of the solar system?",
    "Why is the sky blue?",
    "Tell me a fun fact about octopuses.",
    "How do I make a cup of tea?",
    "What is a healthy breakfast?",
    "Describe the water cycle.",
    "What causes earthquakes?",
    "Write a thank-you note to a teacher.",
    "What is the tallest mountain in the world?",
    "How many continents are there? Name them.",
    "Give me a recipe idea for dinner tonight.",
    "What does a cat need to be happy?",
    "Explain what a rainbow is.",
    "What should I pack for a beach trip?",
    "How can I learn a new language faster?",
    "What is the meaning of the word 'serendipity'?",
    "한국의 수도는 어디인가요?",
    "건강한 아침 식사를 추천해 주세요.",
    "봄에 가기 좋은 여행지를 알려 주세요.",
    "Why do leaves change colour in autumn?",
    "What is the best way to save money?",
    "Write a limerick about a dog.",
    "How does the moon affect tides?",
    "What are some good habits for students?",
    "Describe a sunset in two sentences.",
    "What is chocolate made from?",
    "Explain gravity to a child.",
    "What are the primary colours?",
]


def generate_chat(target_name: str, prompts: int, max_tokens: int, seed: int) -> list[dict[str, Any]]:
    """Single-turn general chat (no tools, no code): the comparison set for benchmarks/drafter_tau.py."""
    target = load_target(target_name)
    engine = Engine(target)
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    clock = 1_767_225_600.0
    for i in range(prompts):
        question = CHAT_PROMPTS[i % len(CHAT_PROMPTS)]
        chat: dict[str, Any] = {"model": target_name, "messages": [{"role": "user", "content": question}]}
        prompt = target.render(chat["messages"])
        params = SamplingParams(max_tokens=max_tokens, temperature=0.7, top_p=0.9, seed=rng.getrandbits(31))
        steps = list(engine.steps(prompt, params))
        completion = [t for st in steps for t in st.token_ids]
        finish = steps[-1].finish_reason or "length"
        text = target.decode([t for t in completion if t not in target.stop_token_ids])
        response = {
            "object": "chat.completion",
            "model": target_name,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            ],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
        }
        rows.append(
            {
                "call_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                "session_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                "agent": "chat",
                "tag": None,
                "api": "openai_chat",
                "method": "POST",
                "path": "/v1/chat/completions",
                "model": target_name,
                "stream": False,
                "status_code": 200,
                "outcome": "ok",
                "request_json": json.dumps(chat, ensure_ascii=False),
                "upstream_request_json": None,
                "response_json": json.dumps(response, ensure_ascii=False),
                "started_at": clock,
                "finished_at": clock + 1.0,
                "prompt_tokens": len(prompt),
                "completion_tokens": len(completion),
                "prompt_token_ids": prompt,
                "completion_token_ids": completion,
                "token_ids_source": "upstream",
                "finish_reason": finish,
                "translated": False,
                "repo": None,
                "lang": "ko" if any("\uac00" <= ch <= "\ud7a3" for ch in question) else "en",
            }
        )
        clock += 10.0
        print(f"chat {i + 1}/{prompts}", flush=True)
    return rows


def write(rows: list[dict[str, Any]], out: Path) -> Path:
    schema = SCHEMA.append(pa.field("repo", pa.string())).append(pa.field("lang", pa.string()))
    for r in rows:
        for k in ("started_at", "finished_at"):
            r[k] = datetime.fromtimestamp(r[k], tz=UTC)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "calls.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, compression="zstd")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m trainer.data.make_sample")
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=72)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--kind", choices=("agent", "chat"), default="agent")
    ap.add_argument("--prompts", type=int, default=48, help="chat: how many single-turn prompts")
    a = ap.parse_args()
    if a.kind == "chat":
        rows = generate_chat(a.target, a.prompts, a.max_tokens, a.seed)
        path = write(rows, a.out or SAMPLE_DIR / f"{a.target}-chat")
    else:
        rows = generate(a.target, a.sessions, a.calls, a.max_tokens, a.seed)
        path = write(rows, a.out or SAMPLE_DIR / a.target)
    print(f"wrote {len(rows)} call records to {path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
