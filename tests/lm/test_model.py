"""Loading, rendering and the hidden-state tap convention on tiny-qwen3 (fast)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lm import Target, load_target
from lm.loading import cache_root

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List the files in src/ please."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]


def test_tiny_qwen3_shape_and_stops(tiny: Target) -> None:
    assert (tiny.num_layers, tiny.hidden_size, tiny.vocab_size) == (4, 256, 151_936)
    assert tiny.model.config.model_type == "qwen3"
    assert not tiny.model.training
    assert tiny.model.dtype == torch.float32
    assert tiny.stop_token_ids[:2] == (151_645, 151_643)  # <|im_end|>, <|endoftext|>
    assert tiny.tool_call_format == "hermes"
    assert tiny.reasoning_format == "think"


def test_tiny_qwen3_is_seeded_and_leaves_the_global_rng_alone(tiny: Target) -> None:
    torch.manual_seed(1234)
    expected_next = torch.rand(3)
    torch.manual_seed(1234)
    again = load_target("tiny-qwen3")
    assert torch.equal(torch.rand(3), expected_next)
    for (name, a), (_, b) in zip(
        tiny.model.state_dict().items(), again.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_unknown_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="smollm2"):
        load_target("no-such-model")


def test_cache_root_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DFLASH_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    assert cache_root(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("DFLASH_CACHE")
    assert cache_root() == Path.home() / ".cache" / "dflash-factory"


def test_hf_directory_round_trip(tiny: Target, tmp_path: Path) -> None:
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    again = load_target(str(tmp_path))
    assert again.name == str(tmp_path)
    ids = torch.tensor([tiny.render(MESSAGES, TOOLS)])
    assert torch.equal(again.model(ids).logits, tiny.model(ids).logits)
    assert again.render(MESSAGES, TOOLS) == tiny.render(MESSAGES, TOOLS)


def test_render_is_the_chat_template_tokenized_without_special_tokens(tiny: Target) -> None:
    ids = tiny.render(MESSAGES, TOOLS)
    text = tiny.tokenizer.apply_chat_template(
        MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False
    )
    assert ids == tiny.tokenizer(text, add_special_tokens=False)["input_ids"]
    decoded = tiny.decode(ids, skip_special_tokens=False)
    assert decoded == text
    assert '"name": "bash"' in decoded
    assert decoded.endswith("<|im_start|>assistant\n")
    no_think = tiny.render(MESSAGES, chat_template_kwargs={"enable_thinking": False})
    assert tiny.decode(no_think, skip_special_tokens=False).endswith("<think>\n\n</think>\n\n")
    assert tiny.render(MESSAGES, add_generation_prompt=False) == tiny.render(MESSAGES)[:-3]


def test_render_normalises_openai_messages_like_vllm(tiny: Target) -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert tiny.render(parts) == tiny.render([{"role": "user", "content": "a\nb"}])
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls src"}'}}
    history = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [call]}]
    text = tiny.decode(tiny.render(history, TOOLS), skip_special_tokens=False)
    # arguments arrive as a JSON string and are rendered through the template's `tojson`
    assert '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls src"}}\n</tool_call>' in text
    assert call["function"]["arguments"] == '{"cmd": "ls src"}'  # the caller's message is untouched


def _check_taps(target: Target, ids: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    n, h = target.num_layers, target.hidden_size
    with torch.no_grad():
        hs = target.model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(hs) == n + 1
    taps = target.tap(ids, list(range(n)), attention_mask=mask)
    assert taps.shape == (*ids.shape, n * h)
    valid = (mask if mask is not None else torch.ones_like(ids)).bool()
    for k in range(n - 1):
        torch.testing.assert_close(taps[..., k * h : (k + 1) * h][valid], hs[k + 1][valid], rtol=0, atol=0)
    last = taps[..., (n - 1) * h :]
    # The final-norm trap: HF's last entry is normed; the tap is the layer's raw output, whose norm it is.
    assert not torch.allclose(last[valid], hs[n][valid], atol=1e-3)
    base = getattr(target.model, target.model.base_model_prefix)
    with torch.no_grad():
        torch.testing.assert_close(base.norm(last)[valid], hs[n][valid])
    # order and repetition follow the request; the taps do not depend on which others were asked for
    two = target.tap(ids, [n - 1, 0], attention_mask=mask)
    torch.testing.assert_close(two, torch.cat([last, taps[..., :h]], dim=-1), rtol=0, atol=0)


def test_tap_convention_and_final_norm_trap(tiny: Target) -> None:
    _check_taps(tiny, torch.tensor([tiny.render(MESSAGES, TOOLS)]))


def test_tap_batched_with_padding(tiny: Target) -> None:
    a, b = tiny.render(MESSAGES), tiny.render(MESSAGES[1:])
    width = max(len(a), len(b))
    ids = torch.full((2, width), tiny.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((2, width), dtype=torch.long)
    for row, seq in enumerate((a, b)):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    _check_taps(tiny, ids, mask)
    # right padding leaves the real positions as they are alone
    alone = tiny.tap(torch.tensor([b]), [0, 2])
    torch.testing.assert_close(tiny.tap(ids, [0, 2], attention_mask=mask)[1, : len(b)], alone[0])


def test_cached_forward_taps_match_the_full_tap(tiny: Target) -> None:
    ids = torch.tensor([tiny.render(MESSAGES)])
    full = tiny.tap(ids, [0, 2])
    cache = tiny.new_cache()
    first = tiny.forward(ids[:, :10], cache, layer_ids=[0, 2], logits_to_keep=1)
    rest = tiny.forward(ids[:, 10:], cache, layer_ids=[0, 2])
    assert first.logits.shape == (1, 1, tiny.vocab_size)
    assert rest.logits.shape[1] == ids.shape[1] - 10
    assert first.taps is not None
    assert rest.taps is not None
    torch.testing.assert_close(torch.cat([first.taps, rest.taps], dim=1), full, atol=1e-4, rtol=1e-4)
    Target.crop_cache(cache, 12)
    assert cache.get_seq_length() == 12


def test_taps_can_feed_a_trainable_module(tiny: Target) -> None:
    feats = tiny.tap(torch.tensor([tiny.render(MESSAGES)]), [0, 1])
    assert not feats.requires_grad
    assert not feats.is_inference()
    fc = torch.nn.Linear(feats.shape[-1], 4)
    fc(feats).sum().backward()
    assert fc.weight.grad is not None


def test_tap_rejects_out_of_range_ids(tiny: Target) -> None:
    with pytest.raises(ValueError, match="out of range"):
        tiny.tap(torch.tensor([[1, 2]]), [tiny.num_layers])


def test_default_layer_ids(tiny: Target) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape_of_qwen3_8b = Qwen3Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=16,
        num_hidden_layers=36,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )
    deep = Target("deep", Qwen3ForCausalLM(shape_of_qwen3_8b), tiny.tokenizer, (), 128)
    assert deep.default_layer_ids(5) == [1, 9, 17, 25, 33]  # DFlash's choice for Qwen3-8B
    assert tiny.default_layer_ids(1) == [2]
    assert tiny.default_layer_ids(2) == [0, 2]
    assert tiny.default_layer_ids(3) == [0, 1, 2]
    with pytest.raises(ValueError, match="tap"):
        tiny.default_layer_ids(4)  # the last layer is never tapped
