"""What bounds a large step's memory on GPU: the flex-attention block mask is built a piece of queries at a
time (objective._create) and is the same mask as the one built at once; a packed step draws at most
`step_anchors` anchored blocks over all its segments. (Same mask: same blocks, same partial/full split,
same dense mask.)"""

from __future__ import annotations

import pytest
import torch

from tests.trainer.dflash.tiny import tiny_drafter, tiny_loss, tiny_target
from trainer.dflash import helpers as H
from trainer.dflash import layout as L
from trainer.dflash.objective import MASK_ROWS, _create
from trainer.packed import PackedStep, sample_anchors

CPU = torch.device("cpu")


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    assert a.shape == b.shape
    assert torch.equal(a.kv_num_blocks, b.kv_num_blocks)
    assert torch.equal(a.full_kv_num_blocks, b.full_kv_num_blocks)
    for x, y, n in (
        (a.kv_indices, b.kv_indices, a.kv_num_blocks),
        (a.full_kv_indices, b.full_kv_indices, a.full_kv_num_blocks),
    ):
        for qb in range(n.shape[-1]):  # only the listed blocks mean anything; the tail is padding
            k = int(n[0, 0, qb])
            assert torch.equal(x[0, 0, qb, :k], y[0, 0, qb, :k])
    assert torch.equal(a.to_dense(), b.to_dense())


def test_a_packed_steps_mask_built_in_pieces_is_the_mask_built_at_once() -> None:
    # two units packed: a session whose second call shares 300 positions with its first, and one call
    lengths, starts = [700, 500, 420], [0, 300, 0]
    share = L.block_diagonal([L.chain_share([0, 300]), L.chain_share([0])])
    layout = L.Layout.build(lengths, starts, share, CPU)
    gen = torch.Generator().manual_seed(0)
    cand = torch.nonzero(L.candidates(torch.ones(layout.length, dtype=torch.long), layout)).flatten()
    anchors = torch.sort(
        cand[torch.randperm(cand.numel(), generator=gen)[:90]]
    ).values  # 90 × 8 = 720 queries
    mod = L.mask_mod(anchors, 8, layout)
    q = anchors.numel() * 8
    _same(_create(mod, q, layout.length, CPU, rows=256), _create(mod, q, layout.length, CPU, rows=q))


def test_one_sequences_mask_built_in_pieces_is_the_mask_built_at_once() -> None:
    t, b = 1500, 16
    anchors = torch.arange(40, 1400, 25)[:70]  # 70 × 16 = 1,120 queries: 8.75 blocks of 128
    mod = H.block_mask_mod(anchors, t, b)
    q = anchors.numel() * b
    _same(_create(mod, q, t, CPU, rows=384), _create(mod, q, t, CPU, rows=q))


def test_a_packed_step_draws_at_most_step_anchors_from_all_its_segments() -> None:
    lengths = [400, 300, 200, 100]
    layout = L.Layout.build(lengths, [0] * 4, L.block_diagonal([L.chain_share([0])] * 4), CPU)
    t = layout.length
    step = PackedStep(torch.zeros(1, t, 4), torch.arange(t), torch.ones(t, dtype=torch.long), layout)
    gen = torch.Generator().manual_seed(0)
    per_segment = sample_anchors(step, 50, gen)
    assert per_segment.numel() == 200  # 50 in each of the four segments
    capped = sample_anchors(step, 50, gen, per_step=120)
    assert capped.numel() == 120
    assert torch.equal(capped, torch.sort(capped).values)
    counts = torch.bincount(layout.seg[capped], minlength=4)
    assert int(counts.max()) <= 50
    assert int(counts.min()) > 0  # every segment keeps a share
    assert (
        sample_anchors(step, 50, gen, per_step=1000).numel() == 200
    )  # a cap above the total changes nothing


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # eager on CPU, on purpose
def test_the_pieced_mask_gives_flex_attention_the_dense_paths_loss() -> None:
    """The flex path (eager flex attention on CPU; compiled on CUDA, not reachable here) over a packed
    step of more than MASK_ROWS queries has the loss of the dense per-segment path."""
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=4).eval()
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(1, 200, (n,), generator=gen) for n in (500, 400)]
    layout = L.Layout.build([500, 400], [0, 0], L.block_diagonal([L.chain_share([0])] * 2), CPU)
    ids = torch.cat(seqs)
    mask = torch.cat([torch.cat([torch.zeros(100), torch.ones(n - 100)]) for n in (500, 400)]).long()
    taps = torch.cat([target.tap(s[None], drafter.target_layer_ids) for s in seqs], dim=1)
    cand = torch.nonzero(L.candidates(mask, layout)).flatten()
    anchors = torch.sort(cand[torch.randperm(cand.numel(), generator=gen)[:300]]).values  # 1,200 queries
    assert anchors.numel() * 4 > MASK_ROWS

    def loss(flex: bool) -> torch.Tensor:
        return tiny_loss(drafter, target, taps, ids, mask, anchors, layout=layout, flex=flex).loss

    with torch.no_grad():
        assert torch.allclose(loss(True), loss(False), atol=1e-5)
