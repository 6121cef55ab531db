"""The stand-in server, driven the way its users drive vLLM: with the `openai` client and plain HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from lm import Engine, Sampler, Target
from lm.standin.server import TargetServer
from tests.lm.conftest import Live, live

MESSAGES = [{"role": "user", "content": "Say something about the weather."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
TOKEN_IDS = {"return_token_ids": True}


def greedy(target: Target, prompt: list[int], n: int) -> list[int]:
    return list(Engine(target).generate(prompt, n, temperature=0))


def test_chat_non_stream_token_ids_match_the_renderer_and_greedy_decode(
    tiny: Target, tiny_live: Live
) -> None:
    resp = tiny_live.client.chat.completions.create(
        model="tiny-qwen3", messages=MESSAGES, max_tokens=12, temperature=0, extra_body=TOKEN_IDS
    )
    prompt = tiny.render(MESSAGES)
    assert resp.prompt_token_ids == prompt
    choice = resp.choices[0]
    assert choice.token_ids == greedy(tiny, prompt, 12)
    assert choice.message.content == tiny.decode(choice.token_ids)
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (len(prompt), 12)
    assert resp.model == "tiny-qwen3"
    assert resp.id.startswith("chatcmpl-")
    again = tiny_live.client.chat.completions.create(
        model="tiny-qwen3", messages=MESSAGES, max_tokens=12, temperature=0, extra_body=TOKEN_IDS
    )
    assert again.choices[0].token_ids == choice.token_ids
    plain = tiny_live.client.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=2)
    assert plain.prompt_token_ids is None
    assert not hasattr(plain.choices[0], "token_ids")


def test_chat_stream_carries_prompt_ids_first_then_new_ids_per_chunk(tiny: Target, tiny_live: Live) -> None:
    stream = tiny_live.client.chat.completions.create(
        model="tiny-qwen3",
        messages=MESSAGES,
        tools=TOOLS,
        max_completion_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=TOKEN_IDS,
    )
    chunks = list(stream)
    prompt = tiny.render(MESSAGES, TOOLS)
    assert chunks[0].prompt_token_ids == prompt
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(getattr(c, "prompt_token_ids", None) is None for c in chunks[1:])
    body = [c for c in chunks[1:] if c.choices]
    ids = [t for c in body for t in c.choices[0].token_ids]
    assert ids == greedy(tiny, prompt, 10)
    assert all(len(c.choices[0].token_ids) == 1 for c in body)
    assert "".join(c.choices[0].delta.content or "" for c in body) == tiny.decode(ids)
    assert body[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (len(prompt), 10)


def test_completions_stream_and_not(tiny: Target, tiny_live: Live) -> None:
    prompt = "The quick brown fox"
    ids = tiny.encode(prompt)
    resp = tiny_live.client.completions.create(
        model="tiny-qwen3", prompt=prompt, max_tokens=6, temperature=0, extra_body=TOKEN_IDS
    )
    choice = resp.choices[0]
    assert choice.prompt_token_ids == ids
    assert choice.token_ids == greedy(tiny, ids, 6)
    assert choice.text == tiny.decode(choice.token_ids)
    by_ids = tiny_live.client.completions.create(model="tiny-qwen3", prompt=ids, max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == choice.text
    chunks = list(
        tiny_live.client.completions.create(
            model="tiny-qwen3", prompt=prompt, max_tokens=6, temperature=0, stream=True, extra_body=TOKEN_IDS
        )
    )
    assert chunks[0].choices[0].prompt_token_ids == ids
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert [t for c in chunks for t in c.choices[0].token_ids] == choice.token_ids


def test_stop_strings_and_seeded_sampling(tiny: Target, tiny_live: Live) -> None:
    client = tiny_live.client
    full = client.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=12, temperature=0)
    text = full.choices[0].message.content or ""
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    cut = client.chat.completions.create(
        model="tiny-qwen3", messages=MESSAGES, max_tokens=12, temperature=0, stop=[stop]
    )
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].stop_reason == stop
    kw: dict[str, Any] = {"model": "tiny-qwen3", "messages": MESSAGES, "max_tokens": 8, "temperature": 1.0}
    a = client.chat.completions.create(seed=5, extra_body=TOKEN_IDS, **kw)
    b = client.chat.completions.create(seed=5, extra_body=TOKEN_IDS, **kw)
    assert a.choices[0].token_ids == b.choices[0].token_ids


def test_context_length_errors_like_vllm(tiny: Target, tiny_live: Live) -> None:
    long = [{"role": "user", "content": "word " * 600}]
    with pytest.raises(openai.BadRequestError) as err:
        tiny_live.client.chat.completions.create(model="tiny-qwen3", messages=long, max_tokens=4)
    assert err.value.status_code == 400
    n = len(tiny.render(long))
    assert "This model's maximum context length is 512 tokens" in err.value.message
    assert f"you requested {n} tokens in the messages" in err.value.message
    with pytest.raises(openai.BadRequestError, match=r"\(\d+ in the messages, 600 in the completion\)"):
        tiny_live.client.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=600)
    raw = httpx.post(f"{tiny_live.url}/v1/completions", json={"prompt": "x " * 600, "max_tokens": 1})
    assert raw.status_code == 400
    assert raw.json()["error"]["type"] == "BadRequestError"


def test_bad_requests(tiny_live: Live) -> None:
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        tiny_live.client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=1)
    missing = httpx.post(f"{tiny_live.url}/v1/chat/completions", json={"model": "tiny-qwen3"})
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == 400
    two = httpx.post(f"{tiny_live.url}/v1/chat/completions", json={"messages": MESSAGES, "n": 2})
    assert two.status_code == 400


def test_concurrent_requests_are_all_answered(tiny: Target, tiny_live: Live) -> None:
    prompts = [[{"role": "user", "content": f"Request number {i}"}] for i in range(6)]

    def ask(messages: list[dict[str, str]]) -> list[int]:
        r = tiny_live.client.chat.completions.create(
            model="tiny-qwen3", messages=messages, max_tokens=5, temperature=0, extra_body=TOKEN_IDS
        )
        return list(r.choices[0].token_ids)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, prompts))
    # interleaving requests forward by forward changes nothing: each equals its own greedy decode
    assert answers == [greedy(tiny, tiny.render(p), 5) for p in prompts]
    metrics = httpx.get(f"{tiny_live.url}/metrics").text
    assert 'vllm:num_requests_waiting{model_name="tiny-qwen3"} 0.0' in metrics
    assert "ONE model forward at a time" in metrics
    assert 'dflash_target_max_concurrent_forwards{model_name="tiny-qwen3"} 1.0' in metrics
    success = [
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("vllm:request_success_total") and 'finished_reason="length"' in line
    ]
    assert success
    assert success[0] >= 6


def test_an_abandoned_stream_is_cancelled(tiny_live: Live) -> None:
    scheduler = tiny_live.server.scheduler
    with httpx.stream(
        "POST",
        f"{tiny_live.url}/v1/chat/completions",
        json={"messages": MESSAGES, "max_tokens": 400, "ignore_eos": True, "stream": True},
        timeout=60,
    ) as r:
        for line in r.iter_lines():
            if '"content"' in line and '"role"' not in line:
                break  # hang up after the first generated token
    for _ in range(100):
        if scheduler.num_running == 0 and scheduler.num_waiting == 0:
            break
        time.sleep(0.1)
    assert scheduler.num_running == 0  # 400 tokens would take tens of seconds: it was dropped


def test_the_event_loop_stays_free_during_generation(
    tiny_live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = tiny_live.server.scheduler
    # The generation is held inside its second forward until the other routes have answered: were the model
    # run on the event loop, the hold would stop the loop too, and those requests would time out.
    real_steps = scheduler.engine.steps
    holding, release = threading.Event(), threading.Event()

    def held_steps(prompt_ids: list[int], params: Any) -> Iterator[Any]:
        steps = real_steps(prompt_ids, params)
        yield next(steps)
        holding.set()
        release.wait(120)  # a hang guard: set as soon as the routes answered
        yield from steps

    monkeypatch.setattr(scheduler.engine, "steps", held_steps)
    body = {"messages": MESSAGES, "max_tokens": 60, "temperature": 0}
    worker = threading.Thread(
        target=httpx.post,
        args=(f"{tiny_live.url}/v1/chat/completions",),
        kwargs={"json": body, "timeout": 300},
    )
    worker.start()
    try:
        assert holding.wait(60), "hang guard: the generation never reached its second forward"
        for path in ("/health", "/v1/models", "/metrics"):
            assert httpx.get(f"{tiny_live.url}{path}", timeout=10).status_code == 200
        assert httpx.post(f"{tiny_live.url}/tokenize", json={"prompt": "hi"}, timeout=10).status_code == 200
        assert scheduler.num_running == 1  # answered while the generation was still running (held)
    finally:
        release.set()
        worker.join()


def test_tokenize_detokenize_models_health(tiny: Target, tiny_live: Live) -> None:
    url = tiny_live.url
    kwargs = {"enable_thinking": False}
    body = {"messages": MESSAGES, "tools": TOOLS, "chat_template_kwargs": kwargs}
    tok = httpx.post(f"{url}/tokenize", json=body).json()
    assert tok["tokens"] == tiny.render(MESSAGES, TOOLS, chat_template_kwargs=kwargs)
    assert tok["count"] == len(tok["tokens"])
    assert tok["max_model_len"] == 512
    no_prompt = httpx.post(f"{url}/tokenize", json={**body, "add_generation_prompt": False}).json()
    assert no_prompt["tokens"] == tiny.render(MESSAGES, TOOLS, add_generation_prompt=False)
    plain = httpx.post(f"{url}/tokenize", json={"prompt": "hello world", "return_token_strs": True}).json()
    assert plain["tokens"] == tiny.encode("hello world")
    assert plain["token_strs"] == ["hello", "Ġworld"]
    text = httpx.post(f"{url}/detokenize", json={"tokens": tok["tokens"]}).json()["prompt"]
    assert text == tiny.render_text(MESSAGES, TOOLS, chat_template_kwargs=kwargs)
    models = tiny_live.client.models.list().data
    assert [m.id for m in models] == ["tiny-qwen3"]
    assert models[0].max_model_len == 512
    assert httpx.get(f"{url}/health").status_code == 200


# ---- tool calling and reasoning, with a strategy that plays back what a trained Qwen3 would say ----------------
class Scripted:
    """A decoding strategy that answers each request with the next scripted reply (then <|im_end|>)."""

    name, spec_stats = "scripted", None

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.prompts: list[list[int]] = []

    def steps(
        self, target: Target, prompt_ids: list[int], sampler: Sampler, max_new_tokens: int
    ) -> Iterator[list[int]]:
        self.prompts.append(prompt_ids)
        for token in [*target.encode(self.replies.pop(0), add_special_tokens=False), 151_645]:
            yield [token]


@pytest.fixture
def scripted(tiny: Target) -> Iterator[tuple[Live, Scripted]]:
    strategy = Scripted([])
    with live(TargetServer(tiny, engine=Engine(tiny, strategy), max_model_len=2048)) as server:
        yield server, strategy


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_tool_calling_round_trip(tiny: Target, scripted: tuple[Live, Scripted]) -> None:
    server, strategy = scripted
    client = server.client
    strategy.replies += [f"<think>\nThe user wants weather.\n</think>\n\n{CALL}", "It is 18°C in Paris."]
    first = client.chat.completions.create(
        model="tiny-qwen3", messages=MESSAGES, tools=TOOLS, extra_body=TOKEN_IDS
    )
    assert first.prompt_token_ids == tiny.render(MESSAGES, TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.reasoning_content == "\nThe user wants weather.\n"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert choice.token_ids[-1] == 151_645

    history = [
        *MESSAGES,
        choice.message.model_dump(include={"role", "content", "tool_calls"}),
        {"role": "tool", "tool_call_id": call.id, "content": "18°C, sunny"},
    ]
    second = client.chat.completions.create(
        model="tiny-qwen3", messages=history, tools=TOOLS, extra_body=TOKEN_IDS
    )
    assert second.prompt_token_ids == tiny.render(history, TOOLS)
    assert strategy.prompts[-1] == second.prompt_token_ids
    rendered = tiny.decode(second.prompt_token_ids, skip_special_tokens=False)
    assert CALL in rendered
    assert "<tool_response>\n18°C, sunny\n</tool_response>" in rendered
    assert second.choices[0].message.content == "It is 18°C in Paris."
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.tool_calls == []


def test_tool_call_stream(scripted: tuple[Live, Scripted]) -> None:
    server, strategy = scripted
    strategy.replies += [f"<think>\nhm\n</think>\n\nChecking.\n{CALL}"]
    chunks = list(
        server.client.chat.completions.create(
            model="tiny-qwen3", messages=MESSAGES, tools=TOOLS, stream=True, extra_body=TOKEN_IDS
        )
    )
    deltas = [c.choices[0].delta for c in chunks]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "\nhm\n"
    assert "".join(d.content or "" for d in deltas) == "\n\nChecking.\n"
    calls = [t for d in deltas for t in d.tool_calls or []]
    assert len(calls) == 1
    assert calls[0].index == 0
    assert calls[0].function is not None
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments or "") == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tools_are_not_parsed_without_tools_or_with_tool_choice_none(scripted: tuple[Live, Scripted]) -> None:
    server, strategy = scripted
    strategy.replies += [CALL, CALL]
    bare = server.client.chat.completions.create(model="tiny-qwen3", messages=MESSAGES)
    assert bare.choices[0].message.content == CALL
    assert not bare.choices[0].message.tool_calls
    none = server.client.chat.completions.create(
        model="tiny-qwen3", messages=MESSAGES, tools=TOOLS, tool_choice="none"
    )
    assert none.choices[0].message.content == CALL
    assert none.choices[0].finish_reason == "stop"


def test_max_tokens_cap_lowers_agent_sized_limits(tiny: Target) -> None:
    """Agents ask for 32k completion tokens; a capped stand-in answers with at most the cap."""
    with live(TargetServer(tiny, max_model_len=512, max_tokens_cap=5)) as server:
        big = server.client.chat.completions.create(
            model="tiny-qwen3", messages=MESSAGES, max_tokens=32000, temperature=0, extra_body=TOKEN_IDS
        )
        small = server.client.chat.completions.create(
            model="tiny-qwen3", messages=MESSAGES, max_tokens=3, temperature=0, extra_body=TOKEN_IDS
        )
    assert len(big.choices[0].token_ids) == 5
    assert big.choices[0].finish_reason == "length"
    assert len(small.choices[0].token_ids) == 3
