"""DSpark, the second drafter kind: its objective (teacher-forced Markov head, confidence on acceptance),
its drafting (lossless against the plain target) and its export in vLLM 0.32's Qwen3DSparkModel layout,
trained, evaluated and exported by the same commands as DFlash (tiny target, in-process)."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open

from tests.trainer.dflash.tiny import MASK, assert_decodes_losslessly, context, tiny_loss, train_kind
from trainer.dflash.config import make_draft_config
from trainer.dflash.dspark import DSparkDraftModel, dspark_config
from trainer.dflash.engine import DSparkSpeculative, speculative
from trainer.dflash.kinds import drafted_tokens, load_drafter
from trainer.dflash.objective import slot_rows


def drafter_for(target, block: int = 4, rank: int = 8) -> DSparkDraftModel:  # type: ignore[no-untyped-def]
    cfg = make_draft_config(target.model.config, num_hidden_layers=1, block_size=block, mask_token_id=MASK)
    torch.manual_seed(0)
    return DSparkDraftModel(dspark_config(cfg, rank))


def test_the_markov_head_is_teacher_forced_and_every_head_learns(target) -> None:  # type: ignore[no-untyped-def]
    d = drafter_for(target)
    ids, mask, taps = context(target, d.target_layer_ids)
    anchors = torch.tensor([5, 9, 20])
    seen: list[torch.Tensor] = []
    d.markov_head.markov_w1.register_forward_hook(lambda _m, args, _o: seen.append(args[0].clone()))
    res = tiny_loss(d, target, taps, ids, mask, anchors, gamma=4.0)  # one objective: the kind adds slot terms
    # three slots per block: slot k follows the TRUE token at anchor + k (the anchor for slot 0)
    assert sorted(seen[0].tolist()) == sorted(int(ids[a + k]) for a in anchors.tolist() for k in range(3))
    assert res.total.tolist() == [3, 3, 3]
    res.loss.backward()
    for name in ("markov_head.markov_w2.weight", "confidence_head.proj.weight", "fc.weight"):
        grad = dict(d.named_parameters())[name].grad
        assert grad is not None
        assert grad.abs().sum() > 0, name


def test_dspark_rows_map_dflash_slots_to_dspark_slots() -> None:
    b = 4  # DFlash slots 1..3 of block a are DSpark slots 0..2 of block a
    assert slot_rows(torch.tensor([1, 2, 3, 5, 7]), b, shift=1).tolist() == [0, 1, 2, 3, 5]
    assert slot_rows(torch.tensor([1, 2, 3, 5, 7]), b, shift=0).tolist() == [1, 2, 3, 5, 7]


def test_host_rows_and_device_rows_give_the_same_dspark_loss(target) -> None:  # type: ignore[no-untyped-def]
    d = drafter_for(target)
    ids, mask, taps = context(target, d.target_layer_ids)
    anchors = torch.tensor([5, 9, 27])  # the last block runs off the end: some slots have no label
    found = tiny_loss(d, target, taps, ids, mask, anchors, gamma=4.0)
    valid = [a * 4 + k for a, start in enumerate(anchors.tolist()) for k in range(1, 4) if start + k < 30]
    given = tiny_loss(d, target, taps, ids, mask, anchors, gamma=4.0, rows=torch.tensor(valid))
    assert found.total.tolist() == given.total.tolist() == [3, 3, 2]
    assert torch.allclose(found.loss, given.loss)


def test_a_fresh_dspark_drafts_what_its_backbone_drafts_and_decodes_losslessly(target) -> None:  # type: ignore[no-untyped-def]
    d = drafter_for(target)
    assert isinstance(speculative(d), DSparkSpeculative)
    hidden = torch.randn(3, 64)
    logits, _ = d.slot_logits(hidden, torch.tensor([1, 2, 3]), target.lm_head.weight)
    assert torch.allclose(logits, hidden @ target.lm_head.weight.T)  # the Markov bias starts at zero
    torch.nn.init.normal_(d.markov_head.markov_w2.weight, std=0.5)  # now it corrects every slot
    # sampling: the rejection runs against the Markov-corrected probabilities
    assert_decodes_losslessly(target, lambda: DSparkSpeculative(d))


def test_dspark_trains_evaluates_losslessly_and_exports_in_vllms_layout(tmp_path, calls, target) -> None:  # type: ignore[no-untyped-def]
    out = train_kind(tmp_path, calls, target, "dspark", head_rank=8)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen3DSparkModel"]
    assert config["block_size"] == 3 == drafted_tokens(out)  # vLLM: num_speculative_tokens = block_size
    assert config["markov_rank"] == 8
    assert config["enable_confidence_head"] is True
    assert config["confidence_head_with_markov"] is True
    assert config["target_layer_ids"] == config["dflash_config"]["target_layer_ids"]
    assert config["mask_token_id"] == MASK
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert tuple(f.get_slice("markov_head.markov_w1.weight").get_shape()) == (256, 8)
        assert tuple(f.get_slice("markov_head.markov_w2.weight").get_shape()) == (256, 8)
        assert tuple(f.get_slice("confidence_head.proj.weight").get_shape()) == (1, 64 + 8)
        assert f.get_tensor("confidence_head.proj.weight").dtype == torch.float32  # vLLM's dtype
        assert f.get_tensor("fc.weight").dtype == torch.bfloat16
    assert not any(n.startswith(("embed_tokens", "lm_head", "model.")) for n in names)
    assert '"method": "dspark"' in (out / "README.md").read_text()
    again = load_drafter(out)  # the export reloads as the same kind
    assert isinstance(again, DSparkDraftModel)
    assert again.block_size == 4
