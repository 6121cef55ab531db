"""The stand-in behind the logging proxy in chat mode: what the proxy records is what the trainer renders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pyarrow.parquet as pq
import pytest

from lm import Engine, Target
from tests.lm.conftest import Live
from tests.support import REPO_ROOT, background, free_port

pytestmark = pytest.mark.slow


def test_proxy_records_prompt_ids_equal_to_the_trainers_rendering(
    tiny: Target, tiny_live: Live, tmp_path: Path
) -> None:
    port = free_port()
    args = ["-m", "proxy", "serve", "--upstream", tiny_live.url, "--port", str(port)]
    args += ["--data-dir", str(tmp_path), "--upstream-api", "chat"]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    with background(args, f"http://127.0.0.1:{port}/healthz", timeout=120):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="tiny-qwen3", messages=messages, max_tokens=6, temperature=0
        )
        assert getattr(reply, "prompt_token_ids", None) is None  # the proxy keeps the ids to itself
        streamed = list(
            client.chat.completions.create(
                model="tiny-qwen3", messages=messages, max_tokens=6, temperature=0, stream=True
            )
        )
        assert (
            "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
            == reply.choices[0].message.content
        )
        anthropic = httpx.post(
            f"http://127.0.0.1:{port}/v1/messages",
            json={"model": "tiny-qwen3", "max_tokens": 6, "temperature": 0, "messages": messages[1:]},
            headers={"anthropic-version": "2023-06-01"},
            timeout=120,
        )
        assert anthropic.status_code == 200, anthropic.text
    subprocess.run(
        [sys.executable, "-m", "proxy", "roll", "--data-dir", str(tmp_path)], cwd=REPO_ROOT, check=True
    )
    rows = pq.read_table(sorted((tmp_path / "calls").glob("*.parquet"))).to_pylist()
    assert sorted(r["api"] for r in rows) == ["anthropic_messages", "openai_chat", "openai_chat"]
    for row in rows:
        sent = json.loads(row["upstream_request_json"])
        prompt = tiny.render(sent["messages"], sent.get("tools"))
        assert row["prompt_token_ids"] == prompt, row["api"]
        assert row["completion_token_ids"] == list(Engine(tiny).generate(prompt, 6, temperature=0))
