"""Training units and packed steps: prefix sharing by longest common prefix, packing to a token budget.

An agent resends its whole history with every call, but a chat template often re-renders earlier turns
(tool calls, stripped reasoning) so a later prompt is not token for token an extension of the previous
call (the session merge in ``build.merge_sessions`` then cannot chain them). The features of a causal
target over a shared prefix are nevertheless the same for every call that shares it, so:

- a **unit** is a session's sequences in order; each is a **segment** that shares its longest common
  prefix (never reaching into its own first supervised span) with the segment before it, and the target
  computes only the rest, continuing from the previous segment's KV cache;
- every segment still attends to its own full context: positions below the shared prefix are read from
  the earlier segment that computed them (``share`` below), so nothing is recomputed on a shortened
  prompt and nothing is truncated;
- a **step** packs whole units up to ``budget`` positions (a unit alone larger than the budget is split
  at segment boundaries into **parts**; a part's first segment then carries its whole context, but its
  features are gathered from its session's, which the target computes once for all its parts).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainer.data.build import Sequence


@dataclass
class Segment:
    seq: Sequence
    shared: int  # leading positions whose features the previous segment of the unit computed

    @property
    def computed(self) -> int:
        return len(self.seq.input_ids) - self.shared


@dataclass
class Unit:
    segments: list[Segment] = field(default_factory=list)
    # A part of a split unit: the whole unit it was cut from (whose features the target computes, once
    # for every part) and the index there of this part's first segment. None for a whole unit.
    origin: Unit | None = None
    first: int = 0

    @property
    def computed(self) -> int:
        """Positions this unit lays into a step (a part's first segment with its whole context)."""
        return sum(s.computed for s in self.segments)

    @property
    def source(self) -> Unit:
        """The unit whose features the target computes for this one: itself, or the unit it was cut from."""
        return self.origin or self

    @property
    def supervised(self) -> int:
        return sum(s.seq.supervised for s in self.segments)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def session_units(seqs: Iterable[Sequence], share: bool = True) -> list[Unit]:
    """One unit per session (sequences without a session are their own unit), in first-seen order."""
    units: dict[str, Unit] = {}
    for i, s in enumerate(seqs):
        key = f"session:{s.session_id}" if s.session_id and share else f"seq:{i}"
        unit = units.setdefault(key, Unit())
        shared = 0
        if unit.segments:
            prev = unit.segments[-1].seq.input_ids
            first_span = s.span_starts[0] if s.span_starts else len(s.input_ids)
            shared = min(common_prefix(prev, s.input_ids), first_span)
        unit.segments.append(Segment(s, shared))
    return list(units.values())


def split_unit(unit: Unit, budget: int) -> list[Unit]:
    """Parts of at most ``budget`` positions where possible (the unit itself when it fits). A part's first
    segment lays out its whole context (shares nothing inside the part); every part keeps ``origin``, so
    its features come from the whole unit's, computed once."""
    parts: list[Unit] = []
    cur = Unit(origin=unit, first=0)
    for i, seg in enumerate(unit.segments):
        new = seg.computed if cur.segments else len(seg.seq.input_ids)
        if cur.segments and cur.computed + new > budget:
            parts.append(cur)
            cur = Unit(origin=unit, first=i)
        cur.segments.append(seg if cur.segments else Segment(seg.seq, 0))
    if cur.segments:
        parts.append(cur)
    return parts if len(parts) > 1 else [unit]


def target_tokens(steps: Iterable[Iterable[Unit]]) -> int:
    """Positions the target computes for one pass over ``steps``: each source unit once, however many
    parts (and steps) it was split into."""
    sources = {id(u.source): u.source for s in steps for u in s}
    return sum(u.computed for u in sources.values())


def pack(units: list[Unit], budget: int) -> list[list[Unit]]:
    """Steps of whole units, each at most ``budget`` computed tokens (first fit, largest first; a unit
    larger than the budget is split first, a single segment larger than it is a step of its own)."""
    parts = [p for u in units for p in split_unit(u, budget)]
    parts.sort(key=lambda u: -u.computed)
    steps: list[list[Unit]] = []
    room: list[int] = []
    for u in parts:
        for i, free in enumerate(room):
            if u.computed <= free:
                steps[i].append(u)
                room[i] -= u.computed
                break
        else:
            steps.append([u])
            room.append(budget - u.computed)
    return steps


def sharing_report(seqs: list[Sequence], units: list[Unit], per_call_tokens: int) -> dict[str, Any]:
    """Target tokens computed per supervised token: once per call, once per merged sequence, shared."""
    supervised = sum(s.supervised for s in seqs)
    merged = sum(len(s.input_ids) for s in seqs)
    shared = sum(u.computed for u in units)

    def per(x: int) -> float | None:
        return round(x / supervised, 3) if supervised else None

    return {
        "supervised_tokens": supervised,
        "target_tokens_per_call": per_call_tokens,
        "target_tokens_merged": merged,
        "target_tokens_shared": shared,
        "per_supervised_token": {
            "per_call": per(per_call_tokens),
            "merged": per(merged),
            "shared": per(shared),
        },
        "reduction_vs_per_call": round(per_call_tokens / shared, 3) if shared else None,
    }
