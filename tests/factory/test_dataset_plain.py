"""The published dataset reads without this project's code: every loading snippet of the card (`datasets`,
pandas, DuckDB) runs against a fresh export and gives back the prompt ids and messages the proxy recorded
for every call; `sequences` loads with `datasets` and supervises each completion the target generated.

The traffic is shaped like a real agent's (tests/fixtures/agents has the captures): Anthropic-style requests
whose `cache_control` marker moves to the newest message each turn (so an earlier message changes), a side
call with a prompt of its own (a title request), a turn the agent re-rendered (its completion is not in the
next prompt), a failed call without ids, a Responses API session (`input`), and a bodiless GET."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from factory.publish.export import export

from .test_export_ids import finished_sessions, qwen_dir, write_parts

GEN = 151_644  # the "assistant turn starts" id every prompt ends with


def _row(sid: str, n: int, body: dict | None, prompt, completion, api: str = "anthropic_messages") -> dict:
    t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=10 * n)
    ok = completion is not None
    return {
        "call_id": f"{sid}-{n:03d}",
        "session_id": sid,
        "agent": "claude-code",
        "user_agent": "claude-cli/2.1.332",
        "api": api,
        "method": "POST" if body else "GET",
        "path": "/v1/messages",
        "model": "target",
        "stream": True,
        "status_code": 200 if ok else 502,
        "outcome": "ok" if ok else "upstream_error",
        "request_json": None if body is None else json.dumps(body),
        "response_json": json.dumps({"id": f"{sid}-{n}"}),
        "started_at": t,
        "first_byte_at": t,
        "finished_at": t,
        "prompt_token_ids": None if prompt is None else list(prompt),
        "completion_token_ids": None if completion is None else list(completion),
        "prompt_tokens": None if prompt is None else len(prompt),
        "completion_tokens": len(completion) if ok else None,
        "token_ids_source": "upstream" if prompt is not None else None,
    }


def agent_session(sid: str, turns: int, seed: int, field: str = "messages") -> list[dict]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 150_000, 300).tolist()  # system prompt and tools
    msgs: list[dict] = []
    rows: list[dict] = []
    for t in range(turns):
        for m in msgs:  # the marker moves to the newest message: earlier messages change
            for part in m["content"]:
                part.pop("cache_control", None)
        text = {
            "type": "text",
            "text": f"tool result {t}: " + "ok " * 30,
            "cache_control": {"type": "ephemeral"},
        }
        msgs.append({"role": "user", "content": [text]})
        ids += rng.integers(0, 150_000, 80).tolist()
        prompt = [*ids, GEN]
        completion = rng.integers(0, 150_000, 20).tolist()
        body = {
            "model": "target",
            "system": f"You are a coding agent ({sid}).",
            "tools": [{"name": "bash"}] * 5,
            field: copy.deepcopy(msgs),
            "max_tokens": 64,
        }
        rows.append(
            _row(
                sid,
                len(rows),
                body,
                prompt,
                completion,
                api="openai_responses" if field == "input" else "anthropic_messages",
            )
        )
        if t == 2:  # a side call: a prompt of its own
            title = {
                "model": "target",
                field: [{"role": "user", "content": [{"type": "text", "text": f"title of {sid}?"}]}],
            }
            rows.append(_row(sid, len(rows), title, rng.integers(0, 150_000, 40).tolist(), [7, 8, 9]))
        if t == 4:  # the same request failed upstream before: no ids
            rows.insert(-1, _row(sid, len(rows), body, None, None))
            rows[-1]["call_id"], rows[-2]["call_id"] = rows[-2]["call_id"], rows[-1]["call_id"]
        # the agent re-renders turn 3's reply in the next request; every other reply is resent as generated
        ids = [*prompt, *(rng.integers(0, 150_000, 20).tolist() if t == 3 else completion)]
        reply = [{"type": "text", "text": f"reply {t}"}]
        msgs.append({"role": "assistant", "content": reply})
    rows.append(_row(sid, len(rows), None, None, None))  # GET /v1/models: no body, no ids
    rows[-1]["outcome"], rows[-1]["status_code"] = "ok", 200
    return rows


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plain")
    sessions, done = finished_sessions(tmp, repos=2)
    rows = [
        r
        for n, s in enumerate(done[:4])
        for r in agent_session(s.proxy_session_id, 8, n, "input" if n == 3 else "messages")
    ]
    write_parts(
        tmp, sorted(rows, key=lambda r: r["started_at"])
    )  # sessions interleaved, as the proxy's parts are
    out = tmp / "ds"
    export(sessions, tmp / "data", out, repo_id="org/agent-traffic")
    return out, {r["call_id"]: r for r in rows}


@pytest.fixture
def offline_datasets(monkeypatch, tmp_path) -> None:
    """`datasets` with no Hub and a cache of its own: it keys a local folder's cache by its name, not its
    files, so another run's `ds` would be read."""
    import datasets.config

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


def snippets(card: str) -> dict[str, str]:
    blocks = re.findall(r"```python\n(.*?)```", card, re.S)
    return {
        name: next(b for b in blocks if key in b)
        for name, key in (
            ("datasets", "load_dataset"),
            ("pandas", "import pandas"),
            ("duckdb", "import duckdb"),
            ("sft", "apply_chat_template"),
        )
    }


def local(snippet: str, out) -> str:
    """The card names the Hub; a local copy is read by the same code with its folder in the Hub path's place."""
    assert not re.search(r"^\s*(from|import) (records|factory|trainer|proxy|wire)\b", snippet, re.M)
    return snippet.replace("hf://datasets/org/agent-traffic", str(out)).replace(
        '"org/agent-traffic"', f'"{out}"'
    )


def want_messages(row: dict) -> list | None:
    body = json.loads(row["request_json"]) if row["request_json"] else None
    return next((body[f] for f in ("messages", "input") if isinstance(body, dict) and f in body), None)


PROJECT = ("records", "factory", "trainer", "proxy", "wire", "lm", "serving", "sandboxes", "clikit")
# Run after the card's pandas snippet in a fresh interpreter: what it rebuilt, and proof that nothing of
# this project was imported (the snippet is all a stranger needs).
_REPORT = """
import json, sys
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(PROJECT))
ids = [None if v is None else [int(x) for x in v] for v in calls.prompt_ids]
out = {"loaded": loaded, "calls": dict(zip(calls.call_id, zip(ids, calls.messages)))}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_pandas_alone_rebuilds_every_call_from_the_card(exported, tmp_path):
    out, proxy = exported
    snippet = snippets((out / "README.md").read_text())["pandas"]
    script = tmp_path / "read.py"
    script.write_text(f"PROJECT = {PROJECT!r}\n" + local(snippet, out) + _REPORT)
    # -I: isolated (no working directory or PYTHONPATH on the path); run from an empty folder
    res = subprocess.run([sys.executable, "-I", str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["loaded"] == []
    assert set(got["calls"]) == set(proxy)
    for call_id, row in proxy.items():
        ids, messages = got["calls"][call_id]
        assert ids == row["prompt_token_ids"], call_id
        assert messages == want_messages(row), call_id
    join = snippet[snippet.index("traj = ") :].strip().splitlines()
    assert len(join) <= 5  # "at most a join and a slice, in five lines"


@pytest.mark.slow
def test_duckdb_reads_the_same_calls(exported):
    out, proxy = exported
    scope: dict = {}
    exec(local(snippets((out / "README.md").read_text())["duckdb"], out), scope)
    for r in scope["calls"].to_dict("records"):
        row = proxy[r["call_id"]]
        ids = r["prompt_ids"]
        assert (None if ids is None or row["prompt_token_ids"] is None else list(ids)) == row[
            "prompt_token_ids"
        ]
        msgs = r["messages"]
        want = want_messages(row)
        assert (None if want is None else [json.loads(m) for m in msgs]) == want


@pytest.mark.slow
def test_datasets_loads_every_config_and_sequences_supervise_the_completions(exported, offline_datasets):
    out, proxy = exported
    scope: dict = {}
    exec(local(snippets((out / "README.md").read_text())["datasets"], out), scope)
    train = [c for c in proxy if c in set(scope["calls"]["call_id"]) and proxy[c]["prompt_token_ids"]]
    assert train
    assert {c: list(scope["prompts"][c]) for c in train} == {c: proxy[c]["prompt_token_ids"] for c in train}
    sequences = scope["sequences"]
    assert set(sequences) == {"train", "test"}
    supervised: list[str] = []
    for split in sequences:
        for s in sequences[split]:
            assert s["split"] == split
            assert len(s["input_ids"]) == len(s["loss_mask"])
            assert sum(s["loss_mask"]) == sum(
                b - a for a, b in zip(s["span_starts"], s["span_ends"], strict=True)
            )
            for c, a, b in zip(s["call_ids"], s["span_starts"], s["span_ends"], strict=True):
                assert s["input_ids"][a:b] == proxy[c]["completion_token_ids"]
                assert s["input_ids"][:a] == proxy[c]["prompt_token_ids"]
                supervised.append(c)
    with_ids = [c for c, r in proxy.items() if r["prompt_token_ids"] and r["completion_token_ids"]]
    assert sorted(supervised) == sorted(with_ids)  # each completion once, the re-rendered one included


@pytest.mark.slow
def test_the_layout_is_compact_and_the_card_describes_it(exported):
    out, _ = exported
    data = out / "data"
    traj = pq.read_table(data / "trajectories").to_pylist()
    calls = pq.read_table(data / "calls").to_pylist()
    # per session: the main chain (the re-rendered turn does not break it: the next prompt still extends
    # it), the side call's own, and one for the failed call that has messages but no ids
    assert len(traj) == 4 * 3
    assert sum(c["completion_in_trajectory"] is False for c in calls) == 4  # the re-rendered turns
    assert sum(c["trajectory_id"] is None for c in calls) == 4  # the GETs
    moved = [len(c["messages_tail"]) for c in calls if c["messages_tail"] is not None]
    assert max(moved) <= 2  # only what changed since: the message that lost its marker, and the newest
    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert {c["config_name"]: [f["split"] for f in c["data_files"]] for c in meta["configs"]} == {
        c: ["train", "test"] for c in ("calls", "trajectories", "sequences", "sessions")
    }
    for config, cols in (("calls", calls[0]), ("trajectories", traj[0])):
        assert f"### `{config}`" in card
        assert all(f"| `{c}` |" in card for c in cols)
    sessions = pq.read_table(data / "sessions").to_pylist()
    licenses = card[card.index("### Licenses per repository") :]
    assert all(f"| {s['repo']} | {s['repo_license']} |" in licenses for s in sessions)


@pytest.mark.slow
def test_the_cards_sft_snippet_renders_a_trajectorys_chat_view(exported, offline_datasets):
    """The chat view as the card says to use it: typed messages and tools through a real chat template."""
    out, _ = exported
    snippet = local(snippets((out / "README.md").read_text())["sft"], out)
    scope: dict = {}
    exec(snippet.replace("<the target model>", qwen_dir()), scope)
    row = scope["row"]
    assert row["chat_messages"][0]["role"] == "system"  # the Messages body's system prompt, as Chat
    assert all(isinstance(m, dict) for m in row["chat_messages"])  # fields, not JSON text
    assert row["chat_messages"][-1]["role"] == "assistant"  # the last reply: a whole SFT example
    assert scope["text"].startswith("<|im_start|>system\nYou are a coding agent")
