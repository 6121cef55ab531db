"""One packed training step: the target's features for a few units, laid side by side.

For each unit the frozen target runs once per segment over only the positions that segment does not
share with the one before it, continuing from that segment's KV cache cropped to the shared prefix: the
features are those of a forward over each call's whole context (what the serving engine computes), but
every shared prefix is computed once. A unit split into parts (``units.split_unit``) keeps that: the target
runs over the whole unit once, and each part's positions are gathered from those features (``part_rows``);
``FeatureMemo`` holds the last units' features so consecutive parts reuse them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from lm.model import Target
from trainer.config import TrainConfig
from trainer.data.build import Sequence
from trainer.data.units import Unit, pack, session_units, split_unit, target_tokens
from trainer.dflash import layout as L
from trainer.sources.base import FeatureSource, step_taps
from trainer.sources.select import kind_of, make_source


class Rows(NamedTuple):
    """What the target gives each computed position: its tapped features and, for greedy labels, its
    greedy next token (``Target.greedy_ids``)."""

    taps: torch.Tensor  # [1, T, n_taps*H]
    greedy: torch.Tensor | None = None  # [1, T] long

    def gather(self, rows: torch.Tensor) -> Rows:
        greedy = None if self.greedy is None else self.greedy[:, rows.to(self.greedy.device)]
        return Rows(self.taps[:, rows.to(self.taps.device)], greedy)


@dataclass
class PackedStep:
    taps: torch.Tensor  # [1, T, n_taps*H]: features of every packed position
    input_ids: torch.Tensor  # [T]: the drafter's inputs (a block's anchor token)
    loss_mask: torch.Tensor  # [T]: the rows that are labels (with greedy labels: along the greedy chain)
    layout: L.Layout
    label_ids: torch.Tensor | None = None  # [T]: each row's label where it is not its own token (greedy)
    target_tokens: int = 0  # positions the target computed for this step (0: its units' were reused)
    cpu_mask: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # loss_mask, kept on the host
    cpu_layout: L.Layout | None = None  # layout, kept on the host: anchors are drawn without a device sync

    @property
    def computed(self) -> int:
        """Packed positions of this step (context rows the drafter attends to)."""
        return int(self.input_ids.numel())

    @property
    def supervised(self) -> int:  # from the host copy: no device synchronisation
        return int((self.cpu_mask if self.cpu_mask.numel() else self.loss_mask).sum())


# (a whole sequence's ids on the host, start) -> [1, T - start, n_taps*H]: the features of positions
# start.. of it. Host ids: looking a sequence up by ids on the accelerator would read them back (a sync).
TapsFn = Callable[[list[int], int], torch.Tensor]


def unit_features(
    target: Target, unit: Unit, layer_ids: list[int], device: torch.device, taps_fn: TapsFn | None = None
) -> torch.Tensor:
    """[1, sum of computed, n_taps*H]: each segment's new positions, continuing the previous KV cache.

    ``taps_fn``: features from elsewhere (a feature source: files, a server) of each segment's positions
    past its shared prefix (those below it are the same features, served by the earlier segment)."""
    return unit_rows(target, unit, layer_ids, device, taps_fn).taps


def unit_rows(
    target: Target,
    unit: Unit,
    layer_ids: list[int],
    device: torch.device,
    taps_fn: TapsFn | None = None,
    greedy: bool = False,
) -> Rows:
    """``unit_features``, and with ``greedy`` the target's greedy next token at each of those positions,
    from the same forwards (the target in-process only: a feature source has no logits)."""
    if greedy and taps_fn is not None:
        raise ValueError("greedy labels need the target in-process (feature_source=hf)")
    parts = []
    cache = target.new_cache()
    capture: AbstractContextManager[list[torch.Tensor]] = target.greedy_ids() if greedy else nullcontext([])
    with capture as found:
        for i, seg in enumerate(unit.segments):
            if taps_fn is not None:
                parts.append(taps_fn(seg.seq.input_ids, seg.shared).to(device, non_blocking=True))
                continue
            ids = torch.tensor(seg.seq.input_ids, dtype=torch.long, device=device)[None]
            last = i == len(unit.segments) - 1
            if seg.shared == 0 and last:  # nothing to continue from, nothing continues from it: no cache
                parts.append(target.tap(ids, layer_ids).to(device))
                continue
            # drop what the previous segment computed beyond the shared prefix, then extend the cache
            Target.crop_cache(cache, seg.shared)
            out = target.forward(ids[:, seg.shared :], cache, layer_ids=layer_ids, logits_to_keep=1)
            assert out.taps is not None
            parts.append(out.taps.to(device))  # a sharded target's taps come off its first GPU
    taps = torch.cat(parts, dim=1)
    return Rows(taps, torch.cat([g.to(device) for g in found], dim=1) if greedy else None)


def part_rows(part: Unit) -> torch.Tensor:
    """Indices into ``unit_features(part.source)`` of the part's packed positions.

    Its first segment lays out its whole context: position p comes from the latest source segment k at
    or before it with ``shared[k] <= p`` (p is below every later segment's shared prefix, so those tokens,
    and a causal target's features of them, are the same). Its other segments are their own rows."""
    segs = part.source.segments
    start = [0]
    for seg in segs:
        start.append(start[-1] + seg.computed)
    i = part.first
    pieces, upper = [], len(segs[i].seq.input_ids)
    for k in range(i, -1, -1):
        lo = segs[k].shared
        if lo < upper:
            pieces.append(torch.arange(start[k], start[k] + upper - lo))
            upper = lo
    rows = list(reversed(pieces))
    rows += [torch.arange(start[k], start[k + 1]) for k in range(i + 1, i + len(part.segments))]
    return torch.cat(rows)


@dataclass
class FeatureMemo:
    """The features of split units whose later parts are still to come (keyed by identity).

    ``plan`` counts, for a pass over steps in order, how many parts of each split unit it takes; a unit's
    features are computed at its first part, kept in host memory while parts remain (a whole session's
    features can be far larger than one step's: they never wait on the accelerator), and dropped after
    its last. Whole units are never kept. Without a plan, every split unit is kept (held-out steps: a
    few, reused at every evaluation)."""

    held: dict[int, tuple[Unit, Rows]] = field(default_factory=dict)
    left: dict[int, int] | None = None
    source: FeatureSource | None = None  # the run's feature source, built at its first step

    def plan(self, steps: Iterable[list[Unit]]) -> None:
        self.held.clear()
        self.left = dict(Counter(id(u.source) for s in steps for u in s if u.origin is not None))

    def features(self, units: list[Unit], compute: Callable[[Unit], Rows]) -> tuple[list[Rows], int]:
        """Each unit's features (a part's gathered from its source's), and the positions the target
        computed for them now."""
        here: dict[int, Rows] = {}  # this step's sources, whatever is dropped meanwhile
        out, computed = [], 0
        for u in units:
            src, key = u.source, id(u.source)
            if key not in here:
                if key in self.held:
                    here[key] = self.held[key][1]
                else:
                    here[key] = compute(src)
                    computed += src.computed
            feats = here[key]
            if u.origin is None:
                out.append(feats)
                continue
            out.append(feats.gather(part_rows(u)))
            left = None if self.left is None else self.left.get(key, 1) - 1
            if left is None or left > 0:
                if key not in self.held:
                    greedy = None if feats.greedy is None else to_host(feats.greedy)
                    self.held[key] = (src, Rows(to_host(feats.taps), greedy))  # the Unit kept: its id stays
                if self.left is not None:
                    self.left[key] = left  # type: ignore[assignment]
            else:
                self.held.pop(key, None)
                self.left.pop(key, None)  # type: ignore[union-attr]
        return out, computed


def to_host(t: torch.Tensor) -> torch.Tensor:
    """``t`` in host memory without the host waiting: into pinned memory on the current stream, so its
    copy back (``make_step``, same stream) is ordered after it. A CPU tensor is already there."""
    if not t.is_cuda:
        return t
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)


def make_step(
    target: Target,
    units: list[Unit],
    layer_ids: list[int],
    device: torch.device,
    taps_fn: TapsFn | None = None,
    memo: FeatureMemo | None = None,
    labels: str = "text",
    supervise: str = "completions",
) -> PackedStep:
    """The step's rows and their labels: ``labels`` text (each row's own token) or greedy (the target's
    greedy chain, ``layout.greedy_targets``); ``supervise`` completions (the recorded completions' rows,
    the sequences' loss mask) or all (every row: the prompt's tool output, code and text too)."""
    memo = memo or FeatureMemo()
    greedy = labels == "greedy"
    rows, computed = memo.features(
        units, lambda src: unit_rows(target, src, layer_ids, device, taps_fn, greedy=greedy)
    )
    segs = [s for u in units for s in u.segments]
    ids = torch.tensor([t for s in segs for t in s.seq.input_ids[s.shared :]], dtype=torch.long)
    mask = torch.tensor([m for s in segs for m in s.seq.loss_mask[s.shared :]], dtype=torch.long)
    if supervise == "all":
        mask = torch.ones_like(mask)
    share = L.block_diagonal([L.chain_share([s.shared for s in u.segments]) for u in units])
    layout = L.Layout.build([s.computed for s in segs], [s.shared for s in segs], share, torch.device("cpu"))
    label_ids = None
    if greedy:
        nxt = torch.cat([r.greedy for r in rows if r.greedy is not None], dim=1)[0].cpu()
        label_ids, mask = L.greedy_targets(ids, nxt, mask, layout)
    return PackedStep(
        torch.cat([r.taps.to(device, non_blocking=True) for r in rows], dim=1),
        ids.to(device),
        mask.to(device),
        layout.map(lambda t: t.to(device)),
        label_ids=None if label_ids is None else label_ids.to(device),
        target_tokens=computed,
        cpu_mask=mask,
        cpu_layout=layout,
    )


def step_for(
    cfg: TrainConfig,
    target: Target,
    units: list[Unit],
    layer_ids: list[int],
    device: torch.device,
    memo: FeatureMemo | None = None,
) -> PackedStep:
    """The packed step with its features from the configured source: the target in-process (``hf``), or
    whole sequences asked of ``trainer.sources`` in one batch (``cache``: offline features; ``vllm``)."""
    taps_fn = None
    memo = memo or FeatureMemo()
    missing = [u for u in {id(u.source): u.source for u in units}.values() if id(u) not in memo.held]
    if not kind_of(cfg.feature_source).in_process and missing:
        if memo.source is None:
            memo.source = make_source(cfg.feature_source, target, feature_dir=cfg.feature_dir, vllm=cfg.vllm)
        source = memo.source
        segs = [seg for u in missing for seg in u.segments]  # whole units: a part's rows are gathered
        from_source = step_taps(source, [s.seq.input_ids for s in segs], layer_ids, [s.shared for s in segs])
        # features in the training dtype: bf16 files feed a float32 CPU drafter as float32
        dtype = next(target.embed_tokens.parameters()).dtype

        def taps_fn(ids: list[int], start: int) -> torch.Tensor:
            return from_source(ids, start).to(dtype)

    return make_step(target, units, layer_ids, device, taps_fn, memo, cfg.labels, cfg.supervise)


def sample_anchors(
    step: PackedStep,
    per_segment: int,
    generator: torch.Generator,
    per_step: int | None = None,
    per_tokens: int | None = None,
) -> torch.Tensor:
    """Anchors drawn uniformly in each segment, then at most ``per_step`` of those drawn uniformly (so
    segments keep shares in proportion to their candidates); sorted step indices.

    A segment gets ``per_segment`` anchors for every ``per_tokens`` supervised positions it holds (rounded
    up): a session merged into one sequence of 30 calls gets the anchors of 30 calls, not of one. Without
    ``per_tokens``, ``per_segment`` is a flat cap per segment."""
    layout = step.cpu_layout or step.layout.map(torch.Tensor.cpu)
    mask = step.cpu_mask if step.cpu_mask.numel() else step.loss_mask.cpu()
    cand = torch.nonzero(L.candidates(mask, layout), as_tuple=False).flatten()
    seg = layout.seg[cand]
    picked = []
    for s in torch.unique(seg).tolist():
        mine = cand[seg == s]
        cap = per_segment if per_tokens is None else per_segment * -(-mine.numel() // per_tokens)
        if mine.numel() > cap:
            mine = mine[torch.randperm(mine.numel(), generator=generator)[:cap]]
        picked.append(mine)
    out = torch.cat(picked) if picked else cand
    if per_step is not None and out.numel() > per_step:
        out = out[torch.randperm(out.numel(), generator=generator)[:per_step]]
    return torch.sort(out).values  # on the host: step_loss moves them (and derives valid_rows) there


def plan_steps(cfg: TrainConfig, seqs: list[Sequence]) -> list[list[Unit]]:
    """The steps of one epoch: units (a session's sequences sharing prefixes, or one sequence each),
    packed up to ``max_len`` computed tokens, or one unit (part) per step."""
    units = session_units(seqs, share=cfg.prefix_sharing)
    if cfg.packing:
        return pack(units, cfg.max_len)
    return [[part] for u in units for part in split_unit(u, cfg.max_len)]


def describe_steps(cfg: TrainConfig, steps: list[list[Unit]]) -> str:
    """One line: the target tokens one epoch computes (each shared prefix once, however the sessions
    were split to fit ``max_len``) and the positions the drafter's steps lay out."""
    computed = [sum(u.computed for u in s) for s in steps]
    segments = sum(len(u.segments) for s in steps for u in s)
    return (
        f"{segments} sequences, {target_tokens(steps)} target tokens per epoch, at most {max(computed)} "
        f"positions per step, packing {'on' if cfg.packing else 'off'}, "
        f"prefix sharing {'on' if cfg.prefix_sharing else 'off'}"
    )


def epoch_order(steps: list[list[Unit]], seed: int) -> list[int]:
    """Step indices for one epoch: a permutation of groups, each group's steps in a row.

    Steps holding parts of the same split unit form a group (chained through any unit they share), so
    its features are computed once per epoch (``FeatureMemo``) instead of once per part; a rank takes a
    contiguous slice of this order, so it keeps that."""
    parent = list(range(len(steps)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for i, units in enumerate(steps):
        for u in units:
            j = owner.setdefault(id(u.source), i)
            parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(steps)):
        groups.setdefault(root(i), []).append(i)
    keys = list(groups)
    perm = torch.randperm(len(keys), generator=torch.Generator().manual_seed(seed)).tolist()
    return [i for k in perm for i in groups[keys[k]]]


def valid_rows(step: PackedStep, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """Flat indices (into anchors × block) of the slots that are labels, from the step's host copies:
    the objective then selects them on the device without waiting for it."""
    layout = step.cpu_layout or step.layout.map(torch.Tensor.cpu)
    mask = step.cpu_mask if step.cpu_mask.numel() else step.loss_mask.cpu()
    _, valid = L.block_labels(mask, mask, anchors.cpu(), block_size, layout)  # validity needs no ids
    return valid.flatten().nonzero().squeeze(1)
