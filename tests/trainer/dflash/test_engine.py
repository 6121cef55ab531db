"""Speculative decoding with the drafter: lossless, counted like vLLM, and a trained drafter reaches tau = B."""

from __future__ import annotations

import pytest
import torch

from lm.engine import Engine, SamplingParams
from tests.trainer.dflash.tiny import MASK, greedy, tiny_drafter, tiny_loss, tiny_target
from trainer.dflash import helpers as H
from trainer.dflash.engine import DFlashSpeculative, _rejection


def _spec(target, drafter, prompt, n):  # type: ignore[no-untyped-def]
    strategy = DFlashSpeculative(drafter)
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    steps = [s.token_ids for s in Engine(target, strategy).steps(prompt, params)]
    return [t for s in steps for t in s], [len(s) for s in steps if s][1:], strategy.spec_stats


def test_untrained_drafter_is_still_lossless() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=6)
    g = torch.Generator().manual_seed(0)
    for n_prompt in (1, 30):
        prompt = torch.randint(1, 200, (n_prompt,), generator=g).tolist()
        out, per_step, stats = _spec(target, drafter, prompt, 20)
        assert out == greedy(target, prompt, 20)
        assert stats.num_drafts == len(per_step)
        assert stats.num_draft_tokens == 5 * stats.num_drafts


def test_lossless_when_drafts_are_right() -> None:
    """An oracle drafter (every proposal accepted) exercises cache cropping and the bonus token."""
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=4)
    prompt = [5, 6, 7, 8]
    truth = greedy(target, prompt, 40)
    strategy = DFlashSpeculative(drafter)
    calls = {"n": 0}

    def oracle(_target, last, _ctx, start, _cache):  # type: ignore[no-untyped-def]
        k = start - len(prompt)  # truth[k] == last
        nxt = (truth + [0] * 10)[k + 1 : k + 4]
        if calls["n"] % 3 == 2:
            nxt = [nxt[0], (nxt[1] + 1) % 200, nxt[2]]  # a wrong second draft now and then
        calls["n"] += 1
        logits = torch.full((3, 256), -1e4)
        logits[torch.arange(3), torch.tensor(nxt)] = 0.0
        return logits

    strategy._draft = oracle  # type: ignore[method-assign]
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    out = [t for s in Engine(target, strategy).steps(prompt, params) for t in s.token_ids]
    assert out == truth
    stats = strategy.spec_stats
    assert stats is not None
    assert stats.accepted_per_pos[0] == stats.num_drafts
    assert stats.num_accepted_tokens > 2 * stats.num_drafts


def test_rejection_sampling_preserves_the_target_distribution() -> None:
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.1, 0.1, 0.1, 0.7]])
    counts = torch.zeros(4)
    for _ in range(6000):
        x = torch.multinomial(q[0], 1, generator=g)
        acc, bonus = _rejection(x, p, q, g)
        counts[int(x) if acc == 1 else bonus] += 1
    assert torch.allclose(counts / counts.sum(), p[0], atol=0.03)


def test_sampling_mode_runs_and_is_seeded() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target)
    params = SamplingParams(max_tokens=20, temperature=0.8, seed=7, ignore_eos=True)
    runs = [
        [t for s in Engine(target, DFlashSpeculative(drafter)).steps([1, 2, 3], params) for t in s.token_ids]
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert len(runs[0]) == 20


@pytest.mark.slow
def test_overfitting_one_sequence_drives_tau_to_the_block_size() -> None:
    """Trained on the target's own continuation of one prompt, the drafter proposes it all: every draft is
    accepted and tau reaches B. Labels shifted by one, a leaky mask or wrong taps keep tau near 1."""
    torch.manual_seed(0)
    target = tiny_target()
    b = 8
    drafter = tiny_drafter(target, block_size=b)
    prompt = list(range(1, 20))
    cont = greedy(target, prompt, 40)
    ids = torch.tensor(prompt + cont)
    mask = torch.tensor([0] * len(prompt) + [1] * len(cont))
    taps = target.tap(ids[None], drafter.target_layer_ids)
    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-2)
    for _ in range(100):
        anchors = H.sample_anchors(mask, 512)
        out = tiny_loss(drafter, target, taps, ids, mask, anchors, block=b, gamma=H.default_gamma(b))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    got, per_step, stats = _spec(target, drafter.eval(), prompt, len(cont))
    assert got == cont  # still the target's greedy output
    tau = sum(per_step) / len(per_step)
    assert tau >= b - 1.0, (tau, per_step, stats)


@torch.no_grad()
def test_the_objective_is_the_weighted_mean_cross_entropy_of_valid_slots() -> None:
    """dflash_loss == sum_k w_k CE_k / sum_k w_k over valid slots, computed here the slow way."""
    import torch.nn.functional as F

    target = tiny_target()
    b = 4
    drafter = tiny_drafter(target, block_size=b)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 200, (30,), generator=g)
    mask = torch.tensor([0] * 10 + [1] * 12 + [0] * 3 + [1] * 5)
    anchors = H.sample_anchors(mask, 512)
    taps = target.tap(ids[None], drafter.target_layer_ids)
    w = H.loss_weights(b, 2.0)
    out = tiny_loss(drafter, target, taps, ids, mask, anchors, block=b, gamma=2.0, chunk=7)
    blk = F.embedding(H.block_input_ids(ids, anchors, b, MASK), target.embed_tokens.weight).reshape(1, -1, 64)
    pos = torch.cat([torch.arange(30), H.block_positions(anchors, b).flatten()])[None]
    hidden = drafter(blk, taps, pos, H.block_attention_mask(anchors, 30, b)).reshape(anchors.numel(), b, -1)
    labels, valid = H.block_labels(ids, mask, anchors, b)
    num = den = 0.0
    for j in range(anchors.numel()):
        for k in range(b):
            if valid[j, k]:
                ce = F.cross_entropy(F.linear(hidden[j, k], target.lm_head.weight)[None], labels[j, k][None])
                num += float(w[k] * ce)
                den += float(w[k])
    assert float(out.loss) == pytest.approx(num / den, rel=1e-4)
    assert int(out.total.sum()) == int(valid.sum())
    assert out.n_labels == int(valid.sum())
