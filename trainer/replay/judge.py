"""Which method drafts better, as far as the replay can tell: intervals, paired differences, a floor.

The unit of sampling is the call (its tokens are not independent: one call's loop accepts everything),
so every interval is a bootstrap over calls — resample the judged calls with replacement, recompute the
figure as a ratio of sums (MAL = 1 + Σ accepted / Σ drafts, as vLLM computes it over a run), take the
2.5th and 97.5th percentiles. Differences between methods are paired: each resample draws the same calls
for every method, so the call-to-call spread every method shares cancels out. Two methods are ranked only
when the interval of their difference excludes 0; otherwise the pair is "not resolved". Below `floor`
draft steps for any judged method, nothing is ranked: the judgement is too small.

Judged: the concurrency-1 level (where each call's counter change is known), the calls every judged method
answered with counters, and the speedup over the baseline on the same calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from trainer.replay.client import Outcome
from trainer.replay.run import ReplayRun

Interval = tuple[float, float]


@dataclass
class Counts:
    """Per judged call (rows) of one method: drafts, accepted, accepted at each position, decode work."""

    drafts: np.ndarray
    accepted: np.ndarray
    per_pos: np.ndarray  # [calls, positions]
    tokens: np.ndarray  # decoded tokens after the first
    seconds: np.ndarray  # decode seconds after the first token


def _counts(outcomes: list[Outcome], width: int) -> Counts:
    per_pos = np.zeros((len(outcomes), width))
    for i, o in enumerate(outcomes):
        if o.spec is not None and o.spec.per_pos:
            per_pos[i, : len(o.spec.per_pos)] = o.spec.per_pos
    return Counts(
        np.array([o.spec.drafts if o.spec else 0.0 for o in outcomes]),
        np.array([o.spec.accepted if o.spec else 0.0 for o in outcomes]),
        per_pos,
        np.array([max(o.completion_tokens - 1, 0) for o in outcomes], dtype=float),
        np.array([o.decode_seconds for o in outcomes]),
    )


def _ci(samples: np.ndarray) -> Interval | None:
    finite = samples[np.isfinite(samples)]
    if finite.size < 2:
        return None
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return round(float(lo), 4), round(float(hi), 4)


def _mal(c: Counts, idx: np.ndarray) -> np.ndarray:
    d = c.drafts[idx].sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, 1 + c.accepted[idx].sum(-1) / np.where(d > 0, d, 1), np.nan)


def _rate(c: Counts, idx: np.ndarray) -> np.ndarray:
    s = c.seconds[idx].sum(-1)
    return np.where(s > 0, c.tokens[idx].sum(-1) / np.where(s > 0, s, 1), np.nan)


def judged_calls(result: ReplayRun, labels: list[str], baseline: str) -> list[str]:
    """The concurrency-1 calls every judged method answered with counters, and the baseline answered."""
    runs = {r.label: r for r in result.runs if r.concurrency == 1}
    keep: set[str] | None = None
    for label in [*labels, baseline]:
        if label not in runs:
            return []
        ok = {o.call_id for o in runs[label].outcomes if o.ok and (label == baseline or o.spec is not None)}
        keep = ok if keep is None else keep & ok
    return sorted(keep or set())


def judge(
    result: ReplayRun,
    labels: list[str],
    baseline: str,
    groups: dict[str, dict[str, str]],
    floor: int,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The judgement of `labels` (the speculative endpoints) against each other and `baseline`.
    `groups`: call id → {"agent": …, "language": …}, for the per-agent and per-language intervals."""
    replayed = {r.label for r in result.runs if r.concurrency == 1}
    missing = [lab for lab in labels if lab not in replayed]  # an endpoint that died is left out, said
    labels = [lab for lab in labels if lab in replayed]
    ids = judged_calls(result, labels, baseline)
    out: dict[str, Any] = {"level": 1, "calls": len(ids), "floor_draft_steps": floor, "resamples": resamples}
    out["not_judged"] = missing
    if not ids or not labels:
        why = "no per-call counters to judge: concurrency 1 was not replayed or no speculative endpoint answered"
        out.update(ranked=False, verdict=why, methods={}, pairs=[])
        return out
    runs = {r.label: {o.call_id: o for o in r.outcomes} for r in result.runs if r.concurrency == 1}
    width = max((len(o.spec.per_pos) for lab in labels for o in runs[lab].values() if o.spec), default=0)
    counts = {lab: _counts([runs[lab][i] for i in ids], width) for lab in [*labels, baseline]}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ids), size=(resamples, len(ids)))
    full = np.arange(len(ids))[None]
    base_rate = _rate(counts[baseline], idx)
    methods: dict[str, Any] = {}
    for lab in labels:
        c = counts[lab]
        d = c.drafts[idx].sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            pos = c.per_pos[idx].sum(1) / d[:, None]
        point_pos = c.per_pos.sum(0) / c.drafts.sum() if c.drafts.sum() else np.zeros(width)
        methods[lab] = {
            "draft_steps": int(c.drafts.sum()),
            "mal": _r(_mal(c, full)[0]),
            "mal_ci": _ci(_mal(c, idx)),
            "per_position_acceptance": [round(float(v), 4) for v in point_pos],
            "per_position_ci": [_ci(pos[:, k]) for k in range(width)],
            "speedup": _r(_rate(c, full)[0] / _rate(counts[baseline], full)[0]),
            "speedup_ci": _ci(_rate(c, idx) / base_rate),
            "by": _by_group(c, ids, groups, rng, resamples),
        }
    small = {lab: m["draft_steps"] for lab, m in methods.items() if m["draft_steps"] < floor}
    pairs = [_pair(a, b, counts, idx, full, methods) for a, b in combinations(labels, 2)]
    if small:
        verdict = "too small to rank: " + ", ".join(f"{k} {v} draft steps" for k, v in small.items())
        verdict += f" (the floor is {floor} per method; decode more: --decode-tokens, --calls)"
        for p in pairs:
            p["verdict"] = "not ranked (below the floor)"
    else:
        verdict = f"{sum(p['resolved'] for p in pairs)} of {len(pairs)} pairs resolved"
    out.update(ranked=not small, verdict=verdict, methods=methods, pairs=pairs)
    return out


def _pair(
    a: str, b: str, counts: dict[str, Counts], idx: np.ndarray, full: np.ndarray, methods: dict[str, Any]
) -> dict[str, Any]:
    diff = _mal(counts[a], idx) - _mal(counts[b], idx)
    point = _mal(counts[a], full)[0] - _mal(counts[b], full)[0]
    ci = _ci(diff)
    resolved = ci is not None and (ci[0] > 0 or ci[1] < 0)
    if resolved and ci is not None:
        hi, lo = (a, b) if ci[0] > 0 else (b, a)
        verdict = f"{hi} > {lo}"
    else:
        verdict = "not resolved"
    return {"a": a, "b": b, "mal_difference": _r(point), "ci": ci, "resolved": resolved, "verdict": verdict}


def _by_group(
    c: Counts, ids: list[str], groups: dict[str, dict[str, str]], rng: np.random.Generator, resamples: int
) -> dict[str, dict[str, Any]]:
    """MAL with its interval within each agent and each language (bootstrap within the group)."""
    out: dict[str, dict[str, Any]] = {}
    for key in ("agent", "language"):
        for value in sorted({groups[i][key] for i in ids}):
            rows = np.array([k for k, i in enumerate(ids) if groups[i][key] == value])
            sub = rows[rng.integers(0, len(rows), size=(resamples, len(rows)))]
            out[f"{key}:{value}"] = {
                "calls": len(rows),
                "draft_steps": int(c.drafts[rows].sum()),
                "mal": _r(_mal(c, rows[None])[0]),
                "mal_ci": _ci(_mal(c, sub)),
            }
    return out


def _r(x: float) -> float | None:
    return round(float(x), 4) if np.isfinite(x) else None
