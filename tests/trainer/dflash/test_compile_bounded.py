"""Compiled flex attention builds a handful of graphs over a run's many lengths, and never falls back to
eager flex attention (which materialises the whole score matrix).

Flex attention and its block mask compile on a GPU in training (trainer.dflash.compiled); here the same
compiled path runs on the CPU, forward only
(flex attention's backward exists only on GPUs). Graphs and recompiles are dynamo's, whatever backend
lowers them: the test compiles with the `eager` backend, because torch 2.13's CPU inductor emits C++ that
does not build for this mask (`cur_qSplitSize3 was not declared`). Every step's context length and anchor
count differ, as in a real run."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from tests.trainer.dflash.tiny import tiny_drafter, tiny_loss, tiny_target
from trainer.dflash import compiled as C
from trainer.dflash import layout as L

pytestmark = pytest.mark.slow  # dynamo traces flex attention for a dozen lengths

B = 4


def test_many_lengths_compile_two_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "COMPILE_ON", {"cuda", "cpu"})
    monkeypatch.setattr(C, "_COMPILED", {})
    monkeypatch.setattr(C, "BACKEND", "eager")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # the process's count: other tests compiled before this one
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    gen = torch.Generator().manual_seed(0)
    lengths = [300, 410, 523, 640, 777, 901, 1100, 1290, 1536, 1800, 2047, 2300]
    graphs = []
    for n in lengths:  # a packed step per length: two segments, the second sharing a prefix
        share = L.block_diagonal([L.chain_share([0, n // 3])])
        layout = L.Layout.build([n - n // 3, n - n // 3], [0, n // 3], share, torch.device("cpu"))
        ids = torch.randint(1, 200, (layout.length,), generator=gen)
        mask = torch.ones_like(ids)
        taps = torch.randn(1, layout.length, 2 * 64, generator=gen)
        cand = torch.nonzero(L.candidates(mask, layout)).flatten()
        anchors = torch.sort(cand[torch.randperm(cand.numel(), generator=gen)[: 20 + n // 50]]).values
        with torch.no_grad():
            out = tiny_loss(drafter, target, taps, ids, mask, anchors, block=B, flex=True, layout=layout)
        assert torch.isfinite(out.loss)
        graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    # Per compiled function (flex attention, its block mask): the first length static, then dynamic
    # graphs (a dimension that was 1 is specialised: one more); after the first few lengths, no new
    # graph at all, however many lengths follow.
    assert graphs[-1] <= 6, graphs
    assert graphs[-1] == graphs[len(lengths) // 2], graphs
    # the compiled path ran, not eager flex attention
    assert set(C._COMPILED) == {("flex_attention", "cpu"), ("create_block_mask", "cpu")}
