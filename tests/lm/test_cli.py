"""`python -m trainer serve-target` and `make target`, as users start them."""

from __future__ import annotations

import subprocess

import openai
import pytest

from lm import Engine, Target
from tests.proxy.live import standin_target
from tests.support import REPO_ROOT


@pytest.mark.slow
def test_serve_target_subprocess(tiny: Target) -> None:
    with standin_target(256, "--threads", "1", timeout=300) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        assert [(m.id, m.max_model_len) for m in client.models.list().data] == [("tiny-qwen3", 256)]
        messages = [{"role": "user", "content": "hello"}]
        resp = client.chat.completions.create(
            model="tiny-qwen3",
            messages=messages,
            max_tokens=8,
            temperature=0,
            extra_body={"return_token_ids": True},
        )
        prompt = tiny.render(messages)
        # another process, the same seeded weights: token for token the in-process greedy decode
        assert resp.prompt_token_ids == prompt
        assert resp.choices[0].token_ids == list(Engine(tiny).generate(prompt, 8, temperature=0))


def test_make_target_runs_the_cli() -> None:
    out = subprocess.run(
        ["make", "-n", "target", "TARGET_MODEL=tiny-qwen3", "TARGET_PORT=8123"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # vLLM where it can run (make vllm); the stand-in, said in one line, where it cannot
    assert "-m serving serve --model tiny-qwen3 --host 127.0.0.1 --port 8123" in out
    assert "-m trainer serve-target --model tiny-qwen3 --host 127.0.0.1 --port 8123" in out


def test_cli_lists_serve_target() -> None:
    from typer.testing import CliRunner

    from trainer.cli import app

    result = CliRunner().invoke(app, ["serve-target", "--help"])
    assert result.exit_code == 0
    assert "--max-model-len" in result.output
    assert "--threads" in result.output
