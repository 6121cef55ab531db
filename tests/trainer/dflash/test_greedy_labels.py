"""Greedy labels (``layout.greedy_targets``): a block's slots are labelled along the target's own greedy
chain, and only while the text follows it — what greedy speculative decoding can accept."""

from __future__ import annotations

import torch

from trainer.dflash import helpers as H
from trainer.dflash import layout as L


def test_labels_are_the_greedy_token_after_the_previous_row() -> None:
    ids = torch.tensor([5, 6, 7, 8, 9])
    nxt = torch.tensor([6, 7, 1, 9, 2])  # the target's greedy token after each row
    labels, mask = L.greedy_targets(
        ids, nxt, torch.ones(5, dtype=torch.long), L.Layout.single(5, torch.device("cpu"))
    )
    assert labels.tolist() == [5, 6, 7, 1, 9]  # row 3's label is what greedy decoding says after row 2
    # a row is a label when the token before it is the greedy choice: rows 1 and 2 follow the chain;
    # row 3's predecessor (7) did (7 == nxt[1]); row 4's predecessor (8) did not (nxt[2] is 1)
    assert mask.tolist() == [0, 0, 1, 1, 0]  # row 1: its predecessor is the segment's first row


def test_a_block_stops_at_the_first_departure_from_the_chain() -> None:
    ids = torch.tensor([1, 2, 3, 4, 5, 6, 7])
    nxt = torch.tensor([2, 3, 4, 0, 6, 7, 8])  # the text leaves the chain at row 4 (greedy said 0)
    labels, mask = L.greedy_targets(
        ids, nxt, torch.ones(7, dtype=torch.long), L.Layout.single(7, torch.device("cpu"))
    )
    lab, valid = H.block_labels(labels, mask, torch.tensor([2]), 4)
    assert lab[0, 1:].tolist() == [4, 0, 6]  # slot 2 is greedy's own token, not the text's
    assert valid[0].tolist() == [False, True, True, False]  # slot 3 sits past the departure: not a label


def test_labels_never_cross_a_segment() -> None:
    layout = L.Layout.build(
        [3, 3], [0, 0], L.block_diagonal([L.chain_share([0]), L.chain_share([0])]), torch.device("cpu")
    )
    ids = torch.tensor([1, 2, 3, 4, 5, 6])
    nxt = torch.tensor([2, 3, 4, 5, 6, 7])
    labels, mask = L.greedy_targets(ids, nxt, torch.ones(6, dtype=torch.long), layout)
    assert labels[3] == 4  # the second segment's first row keeps its own token
    assert mask.tolist() == [0, 0, 1, 0, 0, 1]


def test_only_supervised_rows_are_labels() -> None:
    ids = torch.tensor([1, 2, 3, 4])
    nxt = torch.tensor([2, 3, 4, 5])
    sup = torch.tensor([0, 0, 0, 1])
    _, mask = L.greedy_targets(ids, nxt, sup, L.Layout.single(4, torch.device("cpu")))
    assert mask.tolist() == [0, 0, 0, 1]


def test_a_step_without_a_block_is_a_zero_loss_that_reaches_every_parameter() -> None:
    """Greedy labels on text that never follows the target's chain leave a step no anchor (the e2e chain's
    tiny-qwen3 harvest did): the step still trains (DDP sees every parameter) and counts nothing."""
    from tests.trainer.dflash.tiny import MASK, tiny_drafter, tiny_target
    from trainer.dflash.objective import dflash_loss

    target = tiny_target(layers=4)
    drafter = tiny_drafter(target, block_size=4)
    ids = torch.randint(1, 200, (20,))
    out = dflash_loss(
        drafter,
        taps=target.tap(ids[None], drafter.target_layer_ids),
        input_ids=ids,
        loss_mask=torch.zeros(20, dtype=torch.long),
        anchors=torch.zeros(0, dtype=torch.long),
        embed_weight=target.embed_tokens.weight.detach(),
        lm_head_weight=target.lm_head.weight.detach(),
        block_size=4,
        mask_token_id=MASK,
        weights=H.loss_weights(4, 2.0),
    )
    out.loss.backward()
    assert float(out.loss.detach()) == 0.0
    assert all(p.grad is not None for p in drafter.parameters())
    assert out.total.sum() == 0
    assert out.accepted is not None
    assert out.accepted.numel() == 0
