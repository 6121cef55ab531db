"""Packed steps and prefix sharing: the same loss as one sequence at a time, features computed once."""

from __future__ import annotations

import torch

from tests.trainer.dflash.tiny import tiny_drafter, tiny_loss, tiny_target
from trainer.data.build import Sequence
from trainer.data.units import Segment, Unit, pack, session_units, split_unit, target_tokens
from trainer.dflash import attention as A
from trainer.dflash import helpers as H
from trainer.dflash import layout as L
from trainer.packed import FeatureMemo, epoch_order, make_step, sample_anchors, unit_features

B = 4


def _seq(ids: list[int], sup_from: int, session: str | None = "s") -> Sequence:
    mask = [0] * sup_from + [1] * (len(ids) - sup_from)
    return Sequence(ids, mask, [sup_from], [len(ids)], session, "g")


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(1, 200, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _loss(drafter, target, taps, ids, mask, anchors, layout=None, flex=False):  # type: ignore[no-untyped-def]
    return tiny_loss(drafter, target, taps, ids, mask, anchors, block=B, layout=layout, flex=flex)


def _label_weight(ids, mask, anchors):  # type: ignore[no-untyped-def]
    _, valid = H.block_labels(ids, mask, anchors, B)
    return float((H.loss_weights(B, 2.0)[None, :].expand_as(valid) * valid).sum())


def test_one_segment_layout_is_the_single_sequence_objective() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    s = _seq(_ids(40, 0), 15)
    ids, mask = torch.tensor(s.input_ids), torch.tensor(s.loss_mask)
    taps = target.tap(ids[None], drafter.target_layer_ids)
    anchors = torch.tensor([16, 20, 30, 37])
    plain = _loss(drafter, target, taps, ids, mask, anchors)
    packed = _loss(drafter, target, taps, ids, mask, anchors, layout=L.Layout.single(40, torch.device("cpu")))
    assert torch.allclose(plain.loss, packed.loss)
    assert torch.equal(plain.total, packed.total)


def test_packing_two_documents_weighs_every_label_once_and_never_crosses_documents() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    a, b = _seq(_ids(30, 1), 10, "x"), _seq(_ids(50, 2), 20, "y")
    units = session_units([a, b])
    assert len(units) == 2
    step = make_step(target, units, drafter.target_layer_ids, torch.device("cpu"))
    assert step.computed == 80  # different sessions share nothing
    anchors_a, anchors_b = (
        torch.tensor([12, 20, 28]),
        torch.tensor([21, 33, 48]),
    )  # 28, 48: blocks run off the end
    packed = _loss(
        drafter,
        target,
        step.taps,
        step.input_ids,
        step.loss_mask,
        torch.cat([anchors_a, anchors_b + 30]),
        step.layout,
    )
    parts = []
    for s, anc in ((a, anchors_a), (b, anchors_b)):
        ids, mask = torch.tensor(s.input_ids), torch.tensor(s.loss_mask)
        out = _loss(drafter, target, target.tap(ids[None], drafter.target_layer_ids), ids, mask, anc)
        parts.append((float(out.loss.detach()), _label_weight(ids, mask, anc), out.total))
    expected = sum(loss * w for loss, w, _ in parts) / sum(w for _, w, _ in parts)
    assert abs(float(packed.loss.detach()) - expected) < 1e-5  # per-label normalisation over the whole step
    assert torch.equal(packed.total, parts[0][2] + parts[1][2])  # no label crossed into the other document


def test_a_re_rendered_call_shares_its_common_prefix_and_sees_its_full_context() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    system, turn1, reply1 = _ids(30, 3), _ids(8, 4), _ids(10, 5)
    first = _seq(system + turn1 + reply1, 38)
    # the template re-renders the earlier reply differently: no exact extension, but 38 tokens in common
    second_ids = [*system, *turn1, 7, 7, *reply1[2:], *_ids(6, 6), *_ids(12, 7)]
    second = _seq(second_ids, len(second_ids) - 12)
    [unit] = session_units([first, second])
    assert [s.shared for s in unit.segments] == [0, 38]
    assert unit.computed == len(first.input_ids) + len(second_ids) - 38
    # the shared features are what a forward over the second call's whole context gives
    feats = unit_features(target, unit, drafter.target_layer_ids, torch.device("cpu"))
    full = target.tap(torch.tensor(second_ids)[None], drafter.target_layer_ids)
    assert torch.allclose(feats[:, len(first.input_ids) :], full[:, 38:], atol=1e-5)
    # a feature source (files, a server) serving each segment's positions past its shared prefix gives
    # the same packed features
    served = unit_features(
        target,
        unit,
        drafter.target_layer_ids,
        torch.device("cpu"),
        lambda ids, start: target.tap(torch.tensor(ids)[None], drafter.target_layer_ids)[:, start:],
    )
    assert served.shape == feats.shape
    assert torch.allclose(served, feats, atol=1e-5)
    # the source is asked by the ids on the host: looking them up on an accelerator would read them back
    # (a sync per segment); `meta` stands for the accelerator, whose tensors the host cannot read
    asked: list[object] = []

    def source(ids: list[int], start: int) -> torch.Tensor:
        asked.append(ids)
        return torch.zeros(1, len(ids) - start, feats.shape[-1])

    on_device = unit_features(target, unit, drafter.target_layer_ids, torch.device("meta"), source)
    assert asked == [first.input_ids, second_ids]
    assert on_device.shape == feats.shape
    # and the second call's loss on the packed unit equals its loss computed alone on its full context
    step = make_step(target, [unit], drafter.target_layer_ids, torch.device("cpu"))
    anchors = torch.tensor([len(second_ids) - 12, len(second_ids) - 7, len(second_ids) - 3])
    alone = _loss(drafter, target, full, torch.tensor(second_ids), torch.tensor(second.loss_mask), anchors)
    offset = len(first.input_ids) - 38
    shared = _loss(drafter, target, step.taps, step.input_ids, step.loss_mask, anchors + offset, step.layout)
    assert torch.allclose(alone.loss, shared.loss, atol=1e-5)
    # flex attention's mask_mod is the same rule as the dense mask
    dense = L.attention_mask(anchors + offset, B, step.layout)
    mod = L.mask_mod(anchors + offset, B, step.layout)
    q, t = dense.shape[0], step.layout.length
    qi, ki = torch.arange(q)[:, None].expand(q, t + q), torch.arange(t + q)[None, :].expand(q, t + q)
    assert torch.equal(mod(0, 0, qi, ki), dense)


def test_pack_fills_steps_up_to_the_budget_and_splits_oversized_units() -> None:
    units = [Unit([Segment(_seq(_ids(n, n), 1, None), 0)]) for n in (60, 50, 40, 30, 20)]
    steps = pack(units, 100)
    assert sorted(sorted(u.computed for u in s) for s in steps) == [[20, 30, 50], [40, 60]]
    assert sum(len(s) for s in steps) == 5
    assert all(sum(u.computed for u in s) <= 100 for s in steps)
    big = Unit([Segment(_seq(_ids(80, 1), 1), 0), Segment(_seq(_ids(80, 2), 1), 30)])
    [[p1], [p2]] = sorted(pack([big], 100), key=lambda s: s[0].segments[0].seq.input_ids)
    assert {p1.segments[0].shared, p2.segments[0].shared} == {0}  # a split part computes its whole context


def test_dense_attention_in_query_chunks_is_the_same(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Long contexts with many anchors: the dense path attends in chunks of queries; the result is equal."""
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    s = _seq(_ids(60, 9), 10)
    ids, mask = torch.tensor(s.input_ids), torch.tensor(s.loss_mask)
    taps = target.tap(ids[None], drafter.target_layer_ids)
    anchors = torch.arange(10, 58, 2)  # 24 blocks = 96 queries
    whole = _loss(drafter, target, taps, ids, mask, anchors)
    monkeypatch.setattr(A, "QUERY_CHUNK", 8)  # 12 chunks of two blocks
    chunked = _loss(drafter, target, taps, ids, mask, anchors)
    assert torch.allclose(whole.loss, chunked.loss, atol=1e-6)


def _three_documents(target, drafter):  # type: ignore[no-untyped-def]
    """A packed step of a re-rendered pair of calls (one unit, 38 shared tokens) and another session, with
    anchors in each call: (step, packed anchors, [(call, its anchors in its own positions)])."""
    system, turn1, reply1 = _ids(30, 3), _ids(8, 4), _ids(10, 5)
    first = _seq(system + turn1 + reply1, 38, "s")
    second = _seq([*system, *turn1, 7, 7, *reply1[2:], *_ids(18, 6)], 50, "s")
    other = _seq(_ids(30, 8), 10, "t")
    step = make_step(
        target, session_units([first, second, other]), drafter.target_layer_ids, torch.device("cpu")
    )
    calls = [
        (first, torch.tensor([38, 42, 46])),
        (second, torch.tensor([50, 55, 61])),
        (other, torch.tensor([10, 20, 28])),
    ]
    offsets = [0, len(first.input_ids) - 38, len(first.input_ids) + len(second.input_ids) - 38]
    packed = torch.cat([anc + off for (_, anc), off in zip(calls, offsets, strict=True)])
    return step, packed, calls


def test_the_per_document_mask_is_the_whole_mask_without_the_other_documents() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    step, anchors, _ = _three_documents(target, drafter)
    whole = L.attention_mask(anchors, B, step.layout)  # [Q, T + Q]
    doc = L.document_mask(anchors, B, step.layout)
    t, scored = step.layout.length, 0
    assert [(g.q0, g.q1) for g in doc.groups] == [(0, 12), (12, 24), (24, 36)]  # one group per call
    for g in doc.groups:
        rows = whole[g.q0 : g.q1]
        keys = torch.cat([torch.arange(g.k0, g.k1), t + torch.arange(g.q0, g.q1)])
        assert torch.equal(g.mask, rows[:, keys])  # the same rule inside the group's keys ...
        outside = torch.ones(t + whole.shape[0], dtype=torch.bool)
        outside[keys] = False
        assert not rows[:, outside].any()  # ... and nothing it may see outside them
        scored += g.mask.numel()
    assert scored < whole.numel() / 2  # the point: the other documents are not scored
    # the second call reads the first call's shared prefix: its group spans both calls' positions
    assert (doc.groups[1].k0, doc.groups[1].k1) == (0, step.layout.length - 30)
    # through the drafter: the same block hidden states as with the whole mask
    noise = torch.randn(1, anchors.numel() * B, 64, generator=torch.Generator().manual_seed(0))
    pos = torch.cat([step.layout.pos, L.block_positions(anchors, B, step.layout).flatten()])[None]
    with torch.no_grad():
        a, b = drafter(noise, step.taps, pos, whole), drafter(noise, step.taps, pos, doc)
    assert torch.allclose(a, b, atol=1e-6)


def test_a_packed_step_has_the_loss_and_gradients_of_its_documents_computed_one_at_a_time() -> None:
    """The dense (CPU) packed step attends per document; the loss is still one per step, normalised per
    label over the whole step: equal to the label-weighted mean of each call alone on its full context,
    and so are the drafter's gradients."""
    target = tiny_target()
    target.model.requires_grad_(False)
    drafter = tiny_drafter(target, block_size=B)
    step, anchors, calls = _three_documents(target, drafter)
    packed = _loss(drafter, target, step.taps, step.input_ids, step.loss_mask, anchors, step.layout)
    packed.loss.backward()
    grads = {n: p.grad.clone() for n, p in drafter.named_parameters() if p.grad is not None}
    drafter.zero_grad(set_to_none=True)
    alone = []
    for call, anc in calls:
        ids, mask = torch.tensor(call.input_ids), torch.tensor(call.loss_mask)
        alone.append(_loss(drafter, target, target.tap(ids[None], drafter.target_layer_ids), ids, mask, anc))
    total = sum(out.weight for out in alone)
    expected = sum(out.loss * out.weight for out in alone) / total
    expected.backward()
    assert torch.allclose(packed.loss, expected, atol=1e-5)
    assert torch.equal(packed.total, sum(out.total for out in alone))
    assert grads.keys() == {n for n, p in drafter.named_parameters() if p.grad is not None}
    for name, p in drafter.named_parameters():
        assert torch.allclose(grads[name], p.grad, atol=1e-5, rtol=1e-4), name


def test_a_split_session_computes_its_features_once_and_every_part_sees_its_whole_context() -> None:
    """max_len smaller than a session: each call is a part of its own, laying out its whole context, yet
    the target runs over the session once and each part's features are gathered from that pass."""
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    system, turn1, reply1 = _ids(30, 3), _ids(8, 4), _ids(10, 5)
    first = _seq(system + turn1 + reply1, 38)
    second = _seq([*system, *turn1, 7, 7, *reply1[2:], *_ids(18, 6)], 50)  # re-rendered: shares 38
    third = _seq([*second.input_ids, *_ids(12, 7)], 66)  # an exact extension: shares all of second
    [unit] = session_units([first, second, third])
    parts = split_unit(unit, 40)
    assert [len(p.segments) for p in parts] == [1, 1, 1]
    assert all(p.origin is unit for p in parts)
    assert target_tokens([[p] for p in parts]) == unit.computed == 48 + 28 + 12
    memo = FeatureMemo()
    steps = [make_step(target, [p], drafter.target_layer_ids, torch.device("cpu"), memo=memo) for p in parts]
    assert [s.target_tokens for s in steps] == [unit.computed, 0, 0]  # one pass, reused by the others
    for step, seq in zip(steps, (first, second, third), strict=True):
        alone = target.tap(torch.tensor([seq.input_ids]), drafter.target_layer_ids)
        assert step.computed == len(seq.input_ids)  # the part's call with its whole context
        assert torch.allclose(step.taps, alone, atol=1e-5)  # the features of a forward over that call


def test_an_epoch_takes_the_parts_of_a_split_session_in_a_row() -> None:
    sessions = [[_seq(_ids(20 + i, 10 * k + i), 10, f"s{k}") for i in range(3)] for k in range(4)]
    units = session_units([s for calls in sessions for s in calls])
    steps = [[p] for u in units for p in split_unit(u, 25)]
    assert len(steps) == 12
    for seed in range(3):
        order = epoch_order(steps, seed)
        assert sorted(order) == list(range(12))
        sources = [id(steps[i][0].source) for i in order]
        runs = [s for i, s in enumerate(sources) if i == 0 or sources[i - 1] != s]
        assert len(runs) == 4  # each session's parts consecutive
    assert epoch_order(steps, 0) != epoch_order(steps, 1)  # and the sessions shuffled per epoch


def test_anchors_are_budgeted_per_supervised_token() -> None:
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    short, long = _seq(_ids(30, 1), 20, "x"), _seq(_ids(130, 2), 10, "y")  # 9 and 119 candidates
    step = make_step(target, session_units([short, long]), drafter.target_layer_ids, torch.device("cpu"))
    seg = step.layout.seg
    flat = sample_anchors(step, 8, torch.Generator().manual_seed(0))
    assert torch.bincount(seg[flat]).tolist() == [8, 8]  # a flat cap: the long call gets a short one's
    dense = sample_anchors(step, 8, torch.Generator().manual_seed(0), per_tokens=20)
    # 8 for every 20 supervised positions, rounded up: 8·ceil(9/20) = 8 (all 9 candidates' worth), 8·ceil(119/20) = 48
    assert torch.bincount(seg[dense]).tolist() == [8, 48]


def test_an_epoch_computes_each_session_once_with_packing_too() -> None:
    """Split sessions packed with whole calls: over one epoch in `epoch_order`, the target computes what
    `target_tokens` promises (each source unit once), and every part's features are its call's."""
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=B).eval()
    seqs = []
    for k in range(3):  # sessions of 4 calls, each extending the last one's prompt: they split
        ids = _ids(30, 100 + k)
        for i in range(4):
            ids = [*ids, *_ids(12, 200 + 10 * k + i)]
            seqs.append(_seq(list(ids), len(ids) - 8, f"long{k}"))
    seqs += [_seq(_ids(20 + i, 300 + i), 12, f"short{i}") for i in range(5)]
    steps = pack(session_units(seqs), 70)
    assert any(u.origin is not None for s in steps for u in s)  # sessions were split
    memo = FeatureMemo()
    order = epoch_order(steps, 0)
    memo.plan([steps[i] for i in order])
    computed = 0
    for i in order:
        step = make_step(target, steps[i], drafter.target_layer_ids, torch.device("cpu"), memo=memo)
        computed += step.target_tokens
        at = 0
        for u in steps[i]:
            for n, seg in enumerate(u.segments):
                want = target.tap(torch.tensor([seg.seq.input_ids]), drafter.target_layer_ids)[
                    :, seg.shared :
                ]
                got = step.taps[:, at : at + seg.computed]
                assert torch.allclose(got, want, atol=1e-5), (i, n)
                at += seg.computed
    assert computed == target_tokens(steps)
    assert not memo.held  # every split session dropped after its last part
