"""DFlash2, the third drafter kind: its in-block convolution (vLLM 0.32's formula, causal within a block),
its teacher-forced candidate selector, its candidate walk (lossless against the plain target) and its
export in vLLM's DFlash2DraftModel layout, trained, evaluated and exported by the same commands as DFlash
(tiny target, in-process)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from tests.trainer.dflash.tiny import MASK, assert_decodes_losslessly, context, tiny_loss, train_kind
from trainer.dflash.config import make_draft_config
from trainer.dflash.dflash2 import DFlash2DraftModel, GroupedConv, dflash2_config
from trainer.dflash.engine import DFlash2Speculative, speculative
from trainer.dflash.kinds import drafted_tokens, load_drafter
from trainer.dflash.model import DFlashDraftModel


def drafter_for(target, block: int = 4) -> DFlash2DraftModel:  # type: ignore[no-untyped-def]
    cfg = make_draft_config(target.model.config, num_hidden_layers=1, block_size=block, mask_token_id=MASK)
    torch.manual_seed(0)
    return DFlash2DraftModel(
        dflash2_config(cfg, conv_kernel_size=2, conv_group_size=16, selector_rank=8, selector_top_k=4)
    )


def randomise(d: DFlash2DraftModel) -> DFlash2DraftModel:
    """Off the identity: convolutions and selector that change what is drafted."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in d.named_parameters():
            if "conv" in name or "candidate_selector" in name:
                p.normal_(0, 0.5)
    return d


def test_the_convolution_is_vllms_formula_and_causal_within_each_block() -> None:
    torch.manual_seed(0)
    conv = GroupedConv(hidden=8, taps=2, group_size=4, block_size=3)
    with torch.no_grad():
        conv.base_kernel.normal_()
        conv.kernel_projection.weight.normal_()
    x = torch.randn(1, 6, 8)  # two blocks of three rows
    delta = torch.randn(1, 6, 2, 2)
    got = conv._convolve(x, delta, side=1)
    # vLLM (qwen3_dflash2.py): out[i] = sum_t (base[t] + delta_i[t, group]) * x[i - t], t ≤ i's slot
    want = torch.zeros_like(x)
    for i in range(6):
        for t in range(2):
            if i % 3 >= t:
                coef = conv.base_kernel[1, t] + delta[0, i, t].repeat_interleave(4)
                want[0, i] += coef * x[0, i - t]
    assert torch.allclose(got, want, atol=1e-6)
    nudged = x.clone()
    nudged[0, 1] += 1.0  # slot 1 of block 0
    moved = (conv.prepare(nudged)[0] - conv.prepare(x)[0]).abs().sum(-1)[0]
    assert moved[0] == 0
    assert moved[3:].abs().sum() == 0
    assert moved[1] > 0
    assert moved[2] > 0


def test_a_fresh_dflash2_drafts_what_its_dflash_backbone_drafts(target) -> None:  # type: ignore[no-untyped-def]
    d = drafter_for(target)
    plain = DFlashDraftModel(d.config)
    plain.load_state_dict(
        {k: v for k, v in d.state_dict().items() if "conv" not in k and "selector" not in k}
    )
    noise = torch.randn(1, 4, 64)
    ctx = torch.randn(1, 6, len(d.target_layer_ids) * 64)
    pos = torch.arange(10)[None]
    assert torch.allclose(d(noise, ctx, pos), plain(noise, ctx, pos), atol=1e-5)  # convolutions: identity
    hidden = torch.randn(3, 64)
    ids, unary = d.candidates(hidden, target.lm_head.weight)
    assert torch.equal(d.scores(hidden, torch.tensor([1, 2, 3]), ids, unary), unary)  # selector: no bias


def test_the_selector_is_teacher_forced_and_every_part_learns(target) -> None:  # type: ignore[no-untyped-def]
    d = drafter_for(target)
    ids, mask, taps = context(target, d.target_layer_ids)
    anchors = torch.tensor([5, 9, 20])
    seen: list[torch.Tensor] = []
    terms = d.slot_terms

    def recording(slots, lm_head, head_weight):  # type: ignore[no-untyped-def]
        seen.append(slots.prev.clone())
        return terms(slots, lm_head, head_weight)

    d.slot_terms = recording  # type: ignore[method-assign]
    res = tiny_loss(d, target, taps, ids, mask, anchors, gamma=4.0)
    # slot k (1..3) of a block follows the TRUE token at anchor + k - 1 (the anchor for slot 1)
    assert sorted(seen[0].tolist()) == sorted(
        int(ids[a + k - 1]) for a in anchors.tolist() for k in (1, 2, 3)
    )
    assert res.total.tolist() == [3, 3, 3]
    res.loss.backward()
    grads = {n: p.grad for n, p in d.named_parameters()}
    for name in (
        "layers.0.attention_conv.base_kernel",
        "layers.0.mlp_conv.kernel_projection.weight",
        "candidate_selector.hidden_projection.weight",
        "fc.weight",
    ):
        grad = grads[name]
        assert grad is not None
        assert grad.abs().sum() > 0, name


def test_dflash2_walks_its_candidates_and_decodes_losslessly(target) -> None:  # type: ignore[no-untyped-def]
    d = randomise(drafter_for(target))
    assert isinstance(speculative(d), DFlash2Speculative)
    # sampling: the rejection runs against the K candidates' probabilities
    assert_decodes_losslessly(target, lambda: DFlash2Speculative(d))


def test_the_walk_follows_the_selector_not_the_unary_ranking(target) -> None:  # type: ignore[no-untyped-def]
    d = randomise(drafter_for(target))
    hidden = torch.randn(1, 64)
    ids, unary = d.candidates(hidden, target.lm_head.weight)
    # after two different predecessors the same slot may rank its candidates differently
    a = d.scores(hidden, torch.tensor([3]), ids, unary)
    b = d.scores(hidden, torch.tensor([200]), ids, unary)
    assert not torch.allclose(a, b)
    full = unary + 0  # the selector's score over the whole vocabulary agrees on the candidates
    q = d.candidate_selector.query(hidden, torch.tensor([3]))
    over_vocab = d.candidate_selector.bias(q)
    assert torch.allclose(over_vocab.gather(-1, ids) + full, a, atol=1e-5)


def test_dflash2_trains_evaluates_losslessly_and_exports_in_vllms_layout(tmp_path, calls, target) -> None:  # type: ignore[no-untyped-def]
    out = train_kind(tmp_path, calls, target, "dflash2", head_rank=8, selector_top_k=4, conv_group_size=16)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["DFlash2DraftModel"]
    assert config["block_size"] == 4
    assert drafted_tokens(out) == 3
    d = config["dflash_config"]
    assert (d["conv_kernel_size"], d["conv_group_size"], d["selector_rank"], d["selector_top_k"]) == (
        2,
        16,
        8,
        4,
    )
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        shape = lambda n: tuple(f.get_slice(n).get_shape())  # noqa: E731
        assert shape("layers.0.attention_conv.base_kernel") == (2, 2, 64)
        assert shape("layers.0.mlp_conv.kernel_projection.weight") == (2 * 2 * 64 // 16, 64)
        assert shape("candidate_selector.predecessor_codebook") == (256, 8)
        assert shape("candidate_selector.successor_codebook") == (256, 8)
        assert shape("candidate_selector.hidden_projection.weight") == (8, 64)
    assert not any(n.startswith(("embed_tokens", "lm_head", "model.")) for n in names)
    card = (out / "README.md").read_text()
    assert card.startswith("# DFlash2 drafter")
    assert '"method": "dflash"' in card
    again = load_drafter(out)  # the export reloads as the same kind
    assert isinstance(again, DFlash2DraftModel)


def test_a_group_size_that_does_not_divide_the_width_is_refused_by_name(target) -> None:  # type: ignore[no-untyped-def]
    cfg = make_draft_config(target.model.config, num_hidden_layers=1, block_size=4, mask_token_id=MASK)
    with pytest.raises(ValueError, match="conv_group_size=48 must divide"):
        dflash2_config(cfg, conv_kernel_size=2, conv_group_size=48, selector_rank=8, selector_top_k=4)
