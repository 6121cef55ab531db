"""The pure DFlash conventions, one by one: each of these silently costs acceptance when it is off by one."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.dflash import helpers as H


def test_tap_ids_match_the_reference_spread() -> None:
    assert H.default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]  # Qwen3-8B, the released drafter
    assert H.default_target_layer_ids(36, 1) == [18]
    assert H.default_target_layer_ids(30, 2) == [1, 27]  # SmolLM2-135M
    assert H.default_target_layer_ids(30, 5) == [1, 8, 14, 20, 27]  # round() halves to even, as the reference


@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 2), (4, 2), (4, 3), (5, 3), (6, 2), (28, 5), (64, 8)])
def test_tap_ids_never_reach_the_last_layer(n: int, k: int) -> None:
    ids = H.default_target_layer_ids(n, k)
    assert len(set(ids)) == k
    assert ids == sorted(ids)
    assert min(ids) >= 0
    assert max(ids) <= n - 2


def test_tap_ids_refuse_impossible_requests() -> None:
    with pytest.raises(ValueError, match="cannot pick"):
        H.default_target_layer_ids(3, 3)


def test_gamma_and_loss_weights() -> None:
    assert H.default_gamma(16) == 7
    assert H.default_gamma(10) == 5
    assert H.default_gamma(8) == 4
    w = H.loss_weights(16, 7.0)
    assert w.shape == (16,)
    assert w[0] == 0  # slot 0 is the given anchor, never a label
    assert w[1] == pytest.approx(1.0)  # k = 1: exp(0)
    for k in range(1, 16):
        assert w[k] == pytest.approx(math.exp(-(k - 1) / 7.0))
    assert torch.all(w[1:-1] > w[2:])


def test_anchor_candidates_need_a_supervised_next_token() -> None:
    mask = torch.tensor([0, 0, 1, 1, 1, 0, 0, 1, 1])
    cand = H.anchor_candidates(mask)
    # 2->3 and 3->4 inside the first span; 4 is its last token; 7->8 in the second; 8 is the end
    assert torch.nonzero(cand).flatten().tolist() == [2, 3, 7]


def test_sample_anchors_is_a_sorted_subset_and_reproducible() -> None:
    mask = torch.zeros(200, dtype=torch.long)
    mask[50:150] = 1
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a1, a2 = H.sample_anchors(mask, 16, g1), H.sample_anchors(mask, 16, g2)
    assert torch.equal(a1, a2)
    assert a1.numel() == 16
    assert torch.all(a1[1:] > a1[:-1])
    assert torch.all(H.anchor_candidates(mask)[a1])
    assert H.sample_anchors(mask, 1000).numel() == 99  # all candidates when fewer than asked


def test_block_layout_puts_the_anchor_in_slot_zero() -> None:
    ids = torch.arange(100, 120)
    anchors = torch.tensor([3, 10])
    blk = H.block_input_ids(ids, anchors, 4, mask_token_id=7)
    assert blk.tolist() == [[103, 7, 7, 7], [110, 7, 7, 7]]
    assert H.block_positions(anchors, 4).tolist() == [[3, 4, 5, 6], [10, 11, 12, 13]]


def test_labels_are_the_tokens_at_the_slot_positions_not_shifted() -> None:
    ids = torch.arange(100, 120)
    mask = torch.ones(20, dtype=torch.long)
    labels, valid = H.block_labels(ids, mask, torch.tensor([5]), 4)
    # slot k at position 5+k is trained on ids[5+k]: the anchor's NEXT token for slot 1
    assert labels[0, 1:].tolist() == [106, 107, 108]
    assert valid[0].tolist() == [False, True, True, True]


def test_labels_stop_at_the_end_of_the_generated_span_and_of_the_sequence() -> None:
    ids = torch.arange(12)
    mask = torch.tensor([0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1])
    labels, valid = H.block_labels(ids, mask, torch.tensor([2, 9]), 5)
    # anchor 2: slot 1 (pos 3) supervised, pos 4 is a user turn: everything after it is invalid too,
    # even pos 6 which is supervised again (no block can be accepted across a turn boundary)
    assert valid[0].tolist() == [False, True, False, False, False]
    # anchor 9: positions 10, 11, then past the end
    assert valid[1].tolist() == [False, True, True, False, False]
    assert labels[1, 1:3].tolist() == [10, 11]


def test_mask_is_strictly_before_the_anchor_and_block_local() -> None:
    anchors = torch.tensor([2, 5])
    t, b = 8, 3
    m = H.block_attention_mask(anchors, t, b)
    assert m.shape == (6, 8 + 6)
    for q in range(3):  # block anchored at 2
        assert m[q, :t].tolist() == [True, True, False, False, False, False, False, False]
        assert m[q, t:].tolist() == [True, True, True, False, False, False]
    for q in range(3, 6):  # block anchored at 5: sees 0..4, never 5 (the anchor's own feature)
        assert m[q, :t].tolist() == [True] * 5 + [False] * 3
        assert m[q, t:].tolist() == [False, False, False, True, True, True]


def test_flex_mask_mod_agrees_with_the_dense_mask() -> None:
    anchors = torch.tensor([1, 4, 9])
    t, b = 12, 4
    dense = H.block_attention_mask(anchors, t, b)
    mod = H.block_mask_mod(anchors, t, b)
    q = torch.arange(dense.shape[0])[:, None].expand_as(dense)
    kv = torch.arange(dense.shape[1])[None, :].expand_as(dense)
    zero = torch.zeros_like(q)
    assert torch.equal(mod(zero, zero, q, kv), dense)


def test_per_position_accuracy_counts_valid_slots_only() -> None:
    labels = torch.tensor([[9, 1, 2, 3], [9, 1, 5, 6]])
    pred = torch.tensor([[0, 1, 0, 3], [0, 1, 5, 0]])
    valid = torch.tensor([[False, True, True, True], [False, True, True, False]])
    correct, total = H.per_position_accuracy(pred, labels, valid)
    assert correct.tolist() == [2, 1, 1]
    assert total.tolist() == [2, 2, 1]
