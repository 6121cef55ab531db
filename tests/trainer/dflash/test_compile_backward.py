"""What a GPU's first training steps compile, traced on the CPU: flex attention's forward and backward through
AOTAutograd (`aot_eager`: the same joint graph inductor lowers on a GPU), with the mask function gathering
from its captured buffers, dynamic lengths that are not multiples of 128, grouped heads and bf16 autocast;
and a run's mix of steps — training and no-grad held-out evaluation, one to three segments, a single query
block — kept under the recompile limit, which raises for our calls (trainer.dflash.compiled).

torch refuses flex attention's backward on a CPU with a device check only; the check is lifted here so the
higher-order op's reference backward runs, and its gradients are compared with the dense-mask path's."""

from __future__ import annotations

import contextlib
import random

import pytest
import torch
import torch._dynamo
import torch.nn.attention.flex_attention as flex_module

from lm.model import Target
from tests.trainer.dflash.tiny import tiny_drafter, tiny_loss, tiny_target
from trainer.dflash import compiled as C
from trainer.dflash import layout as L
from trainer.dflash.model import DFlashDraftModel

pytestmark = pytest.mark.slow  # AOTAutograd traces flex attention's joint graph for several shapes

B = 4


@pytest.fixture
def compiled_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "COMPILE_ON", {"cuda", "cpu"})
    monkeypatch.setattr(C, "_COMPILED", {})
    monkeypatch.setattr(C, "BACKEND", "aot_eager")
    monkeypatch.setattr(flex_module, "_validate_device", lambda *a, **k: None)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # the process's count: other tests compiled before this one


def step(
    drafter: DFlashDraftModel,
    target: Target,
    n: int,
    segments: int,
    anchors: int,
    seed: int,
    *,
    flex: bool = True,
    grad: bool = True,
    bf16: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One packed step of `segments` segments over `n` positions (each sharing a prefix with the one before)
    with `anchors` query blocks; its loss and, with `grad`, the drafter's gradients."""
    gen = torch.Generator().manual_seed(seed)
    cuts = [n // (segments + 1) * i for i in range(segments)]
    layout = L.Layout.build(
        [n - c for c in cuts], cuts, L.block_diagonal([L.chain_share(cuts)]), torch.device("cpu")
    )
    ids = torch.randint(1, 200, (layout.length,), generator=gen)
    mask = torch.ones_like(ids)
    taps = torch.randn(1, layout.length, 2 * 64, generator=gen)
    cand = torch.nonzero(L.candidates(mask, layout)).flatten()
    chosen = torch.sort(cand[torch.randperm(cand.numel(), generator=gen)[:anchors]]).values
    drafter.zero_grad()
    mode = contextlib.nullcontext() if grad else torch.no_grad()
    with mode, torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = tiny_loss(drafter, target, taps, ids, mask, chosen, block=B, flex=flex, layout=layout)
    if grad:
        out.loss.backward()
    grads = {k: p.grad.clone() for k, p in drafter.named_parameters() if p.grad is not None}
    return out.loss.detach(), grads


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16-autocast"])
def test_compiled_flex_backward_gives_the_dense_paths_gradients(compiled_on_cpu: None, bf16: bool) -> None:
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).train()
    tol = 3e-2 if bf16 else 1e-4  # bf16: the two paths round differently; float32: the same sums
    for n in (300, 523, 777):
        flex_loss, flex_grads = step(drafter, target, n, 2, 20 + n // 50, n, bf16=bf16)
        dense_loss, dense_grads = step(drafter, target, n, 2, 20 + n // 50, n, flex=False, bf16=bf16)
        assert flex_grads
        assert flex_grads.keys() == dense_grads.keys()
        assert torch.allclose(flex_loss, dense_loss, rtol=tol / 10)
        for name, want in dense_grads.items():
            err = float((flex_grads[name] - want).abs().max() / want.abs().max().clamp_min(1e-12))
            assert err < tol, f"{name} at {n} positions: {err:.2e}"
    assert set(C._COMPILED) == {("flex_attention", "cpu"), ("create_block_mask", "cpu")}


def test_a_runs_mix_of_steps_stays_under_the_recompile_limit(compiled_on_cpu: None) -> None:
    """With dynamo's default limit (8 graphs per function) this mix raised at its 20th step: grad mode
    toggles at each held-out evaluation, and sizes of 1 (one segment, one query block) are specialised."""
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).train()
    r = random.Random(0)
    graphs = []
    for i in range(40):
        n = r.randint(200, 2000)
        anchors = r.choice([1, 5, 20 + n // 50])
        loss, _ = step(drafter, target, n, r.choice([1, 2, 3]), anchors, i, grad=r.random() < 0.7, bf16=True)
        assert torch.isfinite(loss)
        graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    assert graphs[-1] <= C.RECOMPILE_LIMIT
    assert graphs[-1] == graphs[-12], f"still compiling new graphs late in the run: {graphs}"
