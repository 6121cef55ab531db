"""The texts the bundled sample is generated from: agent tools, system prompts, small repositories, tasks
and follow-ups (English and Korean), and single-turn chat prompts for the chat comparison set."""

from __future__ import annotations

from typing import Any

from records.agents import AgentName

TOOLS: list[dict[str, Any]] = [
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
    AgentName.CLAUDE_CODE: (
        "You are Claude Code, an interactive CLI coding agent. You help the user with software engineering "
        "tasks in their repository. Use the tools to read files, run commands and edit code. Keep answers "
        "short and precise. Before editing, read the file. After editing, run the tests. Never invent file "
        "contents. When you call a tool, say which tool and why in one sentence.\n\nTools: read_file(path), "
        "bash(command), edit_file(path, content), grep(pattern)."
    ),
    AgentName.CODEX: (
        "You are Codex, a coding agent running in a terminal. You are working in a git repository. Follow the "
        "user's instructions, inspect the code with shell commands, make minimal changes and verify them with "
        "the project's tests. Report what you changed as a short summary with file paths.\n\nAvailable "
        "commands: read_file, bash, edit_file, grep."
    ),
    AgentName.OPENCODE: (
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
