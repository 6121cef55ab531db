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

import json
import random
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
import typer
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from lm import load_target
from lm.engine import Engine, SamplingParams
from records import SCHEMA
from records.agents import AGENT_NAMES, AgentName
from trainer.data.sample_texts import (
    CHAT_PROMPTS,
    FOLLOW_EN,
    FOLLOW_KO,
    REPOS,
    SYSTEMS,
    TASKS_EN,
    TASKS_KO,
    TOOLS,
)
from wire import API_SHAPES, Api

# The API each agent speaks (any other: Chat Completions, as OpenCode does).
AGENT_APIS = {AgentName.CLAUDE_CODE: Api.MESSAGES, AgentName.CODEX: Api.RESPONSES}

SAMPLE_DIR = Path(__file__).parent / "sample"


def _session(rng: random.Random, i: int) -> dict[str, Any]:
    agent = AGENT_NAMES[i % 3]
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
    shape = API_SHAPES[AGENT_APIS.get(AgentName(agent), Api.CHAT)]
    if shape.from_chat_request is None or shape.to_chat is None:
        return shape.api.value, chat, None
    body = shape.from_chat_request(chat)
    return shape.api.value, body, shape.to_chat(body, return_token_ids=True).request


def _api_response(api: str, chat_response: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    from_chat = API_SHAPES[Api(api)].from_chat
    return from_chat(chat_response, request) if from_chat else chat_response


def _record(
    rng: random.Random,
    s: dict[str, Any],
    session_id: str,
    api: str,
    body: dict[str, Any],
    upstream: dict[str, Any] | None,
    chat_response: dict[str, Any],
    prompt: list[int],
    completion: list[int],
    with_ids: bool,
) -> dict[str, Any]:
    """One call record as the proxy writes it (times are filled in by the caller)."""
    finish = chat_response["choices"][0]["finish_reason"]
    return {
        "call_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "session_id": session_id,
        "agent": s["agent"],
        "tag": None,
        "api": api,
        "method": "POST",
        "path": API_SHAPES[Api(api)].path,
        "model": chat_response["model"],
        "stream": False,
        "status_code": 200,
        "outcome": "ok",
        "request_json": json.dumps(body, ensure_ascii=False),
        "upstream_request_json": json.dumps(upstream, ensure_ascii=False) if upstream else None,
        "response_json": json.dumps(_api_response(api, chat_response, body), ensure_ascii=False),
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
            with_ids = api != Api.CHAT or (i + c) % 3 != 0  # some OpenCode calls carry no ids
            rows.append(
                _record(rng, s, session_id, api, body, upstream, chat_response, prompt, completion, with_ids)
            )
            rows[-1]["started_at"], rows[-1]["finished_at"] = clock, clock + time.monotonic() - t0
            clock += 30.0
            messages.append({"role": "assistant", "content": text})
            if c < len(s["follows"]):
                messages.append({"role": "user", "content": s["follows"][c]})
            else:
                messages.append({"role": "user", "content": "Thanks. Summarise the change in one sentence."})
        typer.echo(f"session {i + 1}/{sessions} ({s['agent']}, {s['language']}): {calls} calls")
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
                "api": Api.CHAT.value,
                "method": "POST",
                "path": API_SHAPES[Api.CHAT].path,
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
        typer.echo(f"chat {i + 1}/{prompts}")
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


class SampleSettings(BaseModel):
    """`python -m trainer.data.make_sample`: what to generate with the CPU target, and where."""

    model_config = ConfigDict(extra="forbid")

    target: str = Field("smollm2", description="The target that answers (smollm2, tiny-qwen3, a model dir).")
    kind: Literal["agent", "chat"] = Field("agent", description="Agent sessions, or single-turn chat.")
    sessions: int = Field(20, ge=2, description="agent: sessions to generate.")
    calls: int = Field(3, ge=1, description="agent: calls per session.")
    prompts: int = Field(48, ge=1, description="chat: single-turn prompts.")
    max_tokens: int = Field(72, ge=1, description="Completion tokens per call.")
    seed: int = Field(0, description="Sampling and id seed.")
    out: Path | None = Field(
        None, description="Output directory; default trainer/data/sample/<target>[-chat]."
    )


@settings_command(SampleSettings)
def sample_command(settings: SampleSettings) -> None:
    """Generate the bundled sample of call records with the CPU target."""
    a = settings
    if a.kind == "chat":
        rows = generate_chat(a.target, a.prompts, a.max_tokens, a.seed)
        path = write(rows, a.out or SAMPLE_DIR / f"{a.target}-chat")
    else:
        rows = generate(a.target, a.sessions, a.calls, a.max_tokens, a.seed)
        path = write(rows, a.out or SAMPLE_DIR / a.target)
    typer.echo(f"wrote {len(rows)} call records to {path} ({path.stat().st_size / 1024:.0f} KiB)")


def main() -> None:
    typer.run(sample_command)


if __name__ == "__main__":
    main()
