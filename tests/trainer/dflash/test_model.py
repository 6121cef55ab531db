"""The drafter module: released parameter names, taps, RoPE, no future leak, training == inference."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

from tests.trainer.dflash.tiny import MASK, tiny_drafter, tiny_loss, tiny_target
from trainer.dflash import helpers as H
from trainer.dflash.config import REQUIRED_KEYS, resolve_mask_token
from trainer.dflash.model import DFlashDraftModel, DraftCache, rotate

# The tensors of a released DFlashDraftModel checkpoint, per drafter layer and at the top.
LAYER_TENSORS = {
    "input_layernorm.weight": ("H",),
    "post_attention_layernorm.weight": ("H",),
    "self_attn.q_proj.weight": ("NH*D", "H"),
    "self_attn.k_proj.weight": ("KV*D", "H"),
    "self_attn.v_proj.weight": ("KV*D", "H"),
    "self_attn.o_proj.weight": ("H", "NH*D"),
    "self_attn.q_norm.weight": ("D",),
    "self_attn.k_norm.weight": ("D",),
    "mlp.gate_proj.weight": ("I", "H"),
    "mlp.up_proj.weight": ("I", "H"),
    "mlp.down_proj.weight": ("H", "I"),
}
TOP_TENSORS = {"fc.weight": ("H", "TAPS*H"), "hidden_norm.weight": ("H",), "norm.weight": ("H",)}


def expected_shapes(cfg, n_taps: int) -> dict[str, tuple[int, ...]]:  # type: ignore[no-untyped-def]
    dims = {
        "H": cfg.hidden_size,
        "D": cfg.head_dim,
        "NH*D": cfg.num_attention_heads * cfg.head_dim,
        "KV*D": cfg.num_key_value_heads * cfg.head_dim,
        "I": cfg.intermediate_size,
        "TAPS*H": n_taps * cfg.hidden_size,
    }
    out = {name: tuple(dims[d] for d in shape) for name, shape in TOP_TENSORS.items()}
    for i in range(cfg.num_hidden_layers):
        out.update(
            {f"layers.{i}.{name}": tuple(dims[d] for d in shape) for name, shape in LAYER_TENSORS.items()}
        )
    return out


def test_parameters_match_the_released_layout() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target, layers=2, taps=3)
    got = {k: tuple(v.shape) for k, v in drafter.state_dict().items()}
    assert got == expected_shapes(drafter.config, 3)  # no embed_tokens, no lm_head, no rotary buffer


def test_config_json_has_the_released_keys(tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=8, layers=2, taps=3)
    drafter.save(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    for key in REQUIRED_KEYS:
        assert key in cfg, key
    assert cfg["architectures"] == ["DFlashDraftModel"]
    assert cfg["model_type"] == "qwen3"
    assert cfg["block_size"] == 8
    assert cfg["num_hidden_layers"] == 2
    assert cfg["num_target_layers"] == target.num_layers
    assert cfg["dflash_config"] == {"mask_token_id": MASK, "target_layer_ids": drafter.target_layer_ids}
    assert cfg["rope_theta"] == target.model.config.rope_parameters["rope_theta"]
    back = DFlashDraftModel.load(tmp_path)
    for k, v in drafter.state_dict().items():
        assert torch.equal(back.state_dict()[k], v)


def test_tap_convention_is_the_output_of_decoder_layer_k() -> None:
    """Tap k = output of decoder layer k = HF hidden_states[k+1]; training (tap) and decoding (forward)
    must see the same thing."""
    target = tiny_target()
    ids = torch.randint(1, 200, (1, 12))
    hs = target.model(ids, output_hidden_states=True).hidden_states
    outputs: dict[int, torch.Tensor] = {}
    hooks = [
        layer.register_forward_hook(
            lambda _m, _i, o, k=k: outputs.__setitem__(k, o[0] if isinstance(o, tuple) else o)
        )
        for k, layer in enumerate(target.layers)
    ]
    target.model(ids)
    for h in hooks:
        h.remove()
    for k in H.default_target_layer_ids(target.num_layers, 3):
        tap = target.tap(ids, [k])
        assert torch.allclose(tap, outputs[k], atol=1e-6)
        assert torch.allclose(tap, hs[k + 1], atol=1e-6)
        assert not torch.allclose(tap, hs[k], atol=1e-3)  # the off-by-one (vLLM's "input to layer k")
    cache = target.new_cache()
    ids2 = [1, 3]
    fwd = target.forward(ids, cache, layer_ids=ids2).taps
    assert fwd is not None
    assert torch.allclose(fwd, target.tap(ids, ids2), atol=1e-5)


def test_rope_matches_the_target() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target)
    x = torch.zeros(1, 5, target.hidden_size)
    pos = torch.tensor([[0, 3, 17, 400, 1000]])
    cos_t, sin_t = target.model.model.rotary_emb(x, pos)
    cos_d, sin_d = drafter.rope(x, pos)
    assert torch.allclose(cos_t, cos_d)
    assert torch.allclose(sin_t, sin_d)
    q = torch.randn(1, 4, 5, cos_t.shape[-1])
    k = torch.randn(1, 2, 5, cos_t.shape[-1])
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos_t, sin_t)  # the target's own (neox / rotate_half)
    assert torch.allclose(rotate(q, cos_d[:, None], sin_d[:, None], "neox"), q_ref, atol=1e-6)
    assert torch.allclose(rotate(k, cos_d[:, None], sin_d[:, None], "neox"), k_ref, atol=1e-6)
    assert not torch.allclose(rotate(q, cos_d[:, None], sin_d[:, None], "interleaved"), q_ref, atol=1e-3)


def _train_hidden(drafter, taps, ids, anchors):  # type: ignore[no-untyped-def]
    b = drafter.block_size
    t = ids.shape[0]
    blk = H.block_input_ids(ids, anchors, b, MASK)
    embed = torch.randn(256, drafter.config.hidden_size, generator=torch.Generator().manual_seed(9))
    noise = F.embedding(blk, embed).reshape(1, -1, drafter.config.hidden_size)
    pos = torch.cat([torch.arange(t), H.block_positions(anchors, b).flatten()])[None]
    mask = H.block_attention_mask(anchors, t, b)
    return drafter(noise, taps, pos, mask).reshape(anchors.numel(), b, -1), embed


@torch.no_grad()
def test_no_future_context_leaks_into_a_block() -> None:
    """Perturbing tokens after an anchor (and so every target feature from the anchor on) changes nothing
    in that block; perturbing one token before it does."""
    torch.manual_seed(0)
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=4).eval()
    ids = torch.randint(1, 200, (40,))
    a = 20
    anchors = torch.tensor([5, a, 30])
    base, _ = _train_hidden(drafter, target.tap(ids[None], drafter.target_layer_ids), ids, anchors)

    after = ids.clone()
    after[a + 1 :] = torch.randint(1, 200, (ids.numel() - a - 1,))
    got, _ = _train_hidden(drafter, target.tap(after[None], drafter.target_layer_ids), after, anchors)
    assert torch.allclose(got[:2], base[:2], atol=1e-5)  # blocks at 5 and at a: untouched

    # the anchor's own feature (position a) must be invisible too: a mask using <= would see it
    taps = target.tap(ids[None], drafter.target_layer_ids)
    taps[:, a] += 10.0
    got, _ = _train_hidden(drafter, taps, ids, anchors)
    assert torch.allclose(got[1], base[1], atol=1e-5)
    assert not torch.allclose(got[2], base[2], atol=1e-3)  # the later block does see position a

    before = ids.clone()
    before[a - 1] = (before[a - 1] + 1) % 200 + 1
    got, _ = _train_hidden(drafter, target.tap(before[None], drafter.target_layer_ids), before, anchors)
    assert not torch.allclose(got[1], base[1], atol=1e-3)


@torch.no_grad()
def test_training_blocks_equal_the_decoding_forward() -> None:
    """A block in the many-anchor training pass computes exactly what decoding computes for that block:
    context = features of positions < anchor, positions anchor..anchor+B-1, with or without the cache."""
    torch.manual_seed(1)
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=5, layers=2).eval()
    ids = torch.randint(1, 200, (30,))
    taps = target.tap(ids[None], drafter.target_layer_ids)
    anchors = torch.tensor([7, 12, 25])
    train, embed = _train_hidden(drafter, taps, ids, anchors)
    b = drafter.block_size
    cache = DraftCache()
    seen = 0
    for j, a in enumerate(anchors.tolist()):
        blk = H.block_input_ids(ids, torch.tensor([a]), b, MASK)
        noise = F.embedding(blk, embed)
        fresh = drafter(noise, taps[:, :a], torch.arange(a + b)[None])
        assert torch.allclose(fresh[0], train[j], atol=1e-5)
        cached = drafter(noise, taps[:, seen:a], torch.arange(seen, a + b)[None], None, cache)
        seen = a
        assert torch.allclose(cached[0], train[j], atol=1e-5)


class _Tok(SimpleNamespace):
    def __len__(self) -> int:
        return self.n  # type: ignore[no-any-return]


def test_mask_token_choice() -> None:
    # a tokenizer with its own mask token
    assert resolve_mask_token(_Tok(n=100, mask_token_id=42, mask_token="<mask>"), 100)[0] == 42
    # Qwen3: 151,669 tokens in a 151,936-row table -> the first spare row, as released Qwen3 drafters use
    qwen = _Tok(n=151_669, mask_token_id=None)
    assert resolve_mask_token(qwen, 151_936)[0] == 151_669
    # a full table (SmolLM2): an unused special token, registered as the mask token
    added = {
        i: SimpleNamespace(content=c)
        for i, c in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<x>", "<y>"])
    }
    registered = {}
    smol = _Tok(
        n=50,
        mask_token_id=None,
        chat_template="<|im_start|>{{ m }}<|im_end|>",
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        unk_token_id=None,
        added_tokens_decoder=added,
        add_special_tokens=lambda d: registered.update(d),
    )
    mid, how = resolve_mask_token(smol, 50)
    assert mid == 4, how
    assert registered == {"mask_token": "<y>"}, how


def test_model_refuses_a_tap_past_the_last_usable_layer() -> None:
    from trainer.dflash.config import make_draft_config

    target = tiny_target()
    with pytest.raises(ValueError, match="out of range"):
        make_draft_config(
            target.model.config, num_hidden_layers=1, block_size=4, mask_token_id=MASK, target_layer_ids=[5]
        )


@torch.no_grad()
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_flex_attention_path_equals_the_explicit_mask() -> None:
    """GPUs train with flex attention and a block mask; it must compute what SDPA + the dense mask does."""
    from trainer.dflash.objective import _flex_mask

    target = tiny_target()
    drafter = tiny_drafter(target, block_size=4).eval()
    ids = torch.randint(1, 200, (40,), generator=torch.Generator().manual_seed(0))
    anchors = torch.tensor([3, 10, 20, 33])
    taps = target.tap(ids[None], drafter.target_layer_ids)
    noise = F.embedding(H.block_input_ids(ids, anchors, 4, MASK), target.embed_tokens.weight).reshape(
        1, 16, -1
    )
    pos = torch.cat([torch.arange(40), H.block_positions(anchors, 4).flatten()])[None]
    dense = drafter(noise, taps, pos, H.block_attention_mask(anchors, 40, 4))
    flex = drafter(noise, taps, pos, _flex_mask(anchors, 40, 4, torch.device("cpu")))
    assert torch.allclose(dense, flex, atol=1e-5)


def test_checkpointed_layers_give_the_same_gradients() -> None:
    """`activation_checkpointing`: each layer recomputed in backward, the same loss and gradients."""
    target = tiny_target()
    grads = []
    for on in (False, True):
        drafter = tiny_drafter(target, block_size=4).train()
        drafter.checkpoint_layers = on
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(1, 200, (120,), generator=gen)
        taps = torch.randn(1, 120, 2 * 64, generator=gen)
        out = tiny_loss(drafter, target, taps, ids, torch.ones_like(ids), torch.tensor([10, 50, 90]))
        out.loss.backward()
        grads.append({n: p.grad for n, p in drafter.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.allclose(grads[0][n], grads[1][n], atol=1e-6) for n in grads[0])
