"""The replay's figures: per level and endpoint, MAL from the server's counters, output tokens/s, time to
first token, speedup over the baseline, overall and per agent × language, how many greedy outputs
differ from the baseline's and whose numerics that is, the judgement (intervals, paired differences and
the ranking they support: trainer/replay/judge.py) and the outputs' degeneracy (trainer/replay/evidence.py)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from trainer.replay.calls import ReplayCall
from trainer.replay.client import Outcome
from trainer.replay.counters import SpecCounters
from trainer.replay.evidence import degeneracy
from trainer.replay.judge import judge
from trainer.replay.run import LevelRun, ReplayRun
from trainer.replay.settings import ReplaySettings


def _rate(outcomes: list[Outcome]) -> float | None:
    """Decode tokens per second: the tokens after the first over the time after it (token-weighted over the
    requests). Speculative decoding changes decoding only; on a CPU a cold prompt's prefill takes minutes and
    would drown it, so time to first token is reported apart (TTFT)."""
    seconds = sum(o.decode_seconds for o in outcomes)
    return sum(max(o.completion_tokens - 1, 0) for o in outcomes) / seconds if seconds > 0 else None


def _r(x: float | None, digits: int = 4) -> float | None:
    return round(x, digits) if x is not None else None


def _speedup(mine: list[Outcome], base: dict[str, Outcome]) -> float | None:
    """Tokens/s ratio over the calls both endpoints answered."""
    pairs = [(o, base[o.call_id]) for o in mine if o.ok and o.call_id in base and base[o.call_id].ok]
    a, b = _rate([p[0] for p in pairs]), _rate([p[1] for p in pairs])
    return a / b if a and b else None


def _spec_sum(outcomes: list[Outcome]) -> SpecCounters | None:
    specs = [o.spec for o in outcomes if o.spec is not None]
    if not specs:
        return None
    total = SpecCounters()
    for s in specs:
        total = total + s
    return total


def _groups(run: LevelRun, base: dict[str, Outcome] | None) -> dict[str, dict[str, Any]]:
    by: dict[str, list[Outcome]] = defaultdict(list)
    for o in run.outcomes:
        by[o.group].append(o)
    out = {}
    for group, outcomes in sorted(by.items()):
        ok = [o for o in outcomes if o.ok]
        spec = _spec_sum(ok)
        out[group] = {
            "calls": len(outcomes),
            "ok": len(ok),
            "tokens_per_s": _r(_rate(ok), 2),
            "mal": _r(spec.mal) if spec else None,
            "speedup": _r(_speedup(ok, base)) if base is not None else None,
        }
    return out


def _level_stats(run: LevelRun, base: dict[str, Outcome] | None) -> dict[str, Any]:
    ok = [o for o in run.outcomes if o.ok]
    ttfts = [o.ttft for o in ok if o.ttft is not None]
    differ = []
    if base is not None:
        differ = [
            o.call_id
            for o in ok
            if o.call_id in base and base[o.call_id].ok and o.output() != base[o.call_id].output()
        ]
    tokens = sum(o.completion_tokens for o in ok)
    return {
        "requests": len(run.outcomes),
        "ok": len(ok),
        "failed": len(run.outcomes) - len(ok),
        "output_tokens": tokens,
        "tokens_per_s": _r(_rate(ok), 2),
        "throughput_tokens_per_s": _r(tokens / run.wall_seconds, 2) if run.wall_seconds > 0 else None,
        "mean_ttft_s": _r(sum(ttfts) / len(ttfts)) if ttfts else None,
        "wall_seconds": round(run.wall_seconds, 2),
        "spec": run.spec.as_dict() if run.spec is not None else None,
        "speedup": _r(_speedup(ok, base)) if base is not None else None,
        "outputs_compared": sum(
            1 for o in ok if base is not None and o.call_id in base and base[o.call_id].ok
        ),
        "outputs_differ": len(differ),
        "differing_calls": differ,
        "groups": _groups(run, base),
    }


def build_report(
    settings: ReplaySettings,
    selection: dict[str, Any],
    calls: list[ReplayCall],
    result: ReplayRun,
    evidence: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    baseline = settings.baseline_label
    levels: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for level in settings.concurrency:
        runs = {r.label: r for r in result.runs if r.concurrency == level}
        if not runs:
            continue
        base_run = runs.get(baseline)
        base = {o.call_id: o for o in base_run.outcomes} if base_run is not None else None
        stats = {label: _level_stats(r, None if label == baseline else base) for label, r in runs.items()}
        levels[level] = {"concurrency": level, "endpoints": stats}
        for label, st in stats.items():
            kinds = [d.kind for d in result.divergences if d.endpoint == label and d.concurrency == level]
            st["near_ties"] = kinds.count("near_tie")
            st["engine_divergences"] = kinds.count("engine")  # a model-free method parts there too
            st["mismatches"] = len(kinds) - st["near_ties"] - st["engine_divergences"]
            if label != baseline and st["mismatches"]:
                problems.append(
                    f"{st['mismatches']} of {st['outputs_compared']} greedy outputs of {label} differ from "
                    f"{baseline}'s at concurrency {level} where the target's top-2 gap is not a near-tie: "
                    "the endpoints do not decode the same model losslessly"
                )
            spec = st["spec"]
            served = next(s for s in result.served if s.label == label)
            if served.speculative and st["ok"] and (spec is None or not spec["drafts"]):
                problems.append(f"{label} is labelled speculative but drafted nothing at concurrency {level}")
    problems += [f"left out from then on: {why}" for why in result.dropped.values()]
    if result.aborted:
        problems.append(f"stopped early: {result.aborted}")
    overall = {}
    for s in result.served:
        total = None
        for r in result.runs:
            if r.label == s.label and r.spec is not None:
                total = r.spec if total is None else total + r.spec
        overall[s.label] = total.as_dict() if total is not None else None
    speculative = [s.label for s in result.served if s.has_counters and s.label != baseline]  # ngram too
    groups = {c.call_id: {"agent": c.agent, "language": c.language} for c in calls}
    floor, resamples = settings.min_draft_steps, settings.resamples
    judgement = judge(result, speculative, baseline, groups, floor, resamples, settings.seed)
    return {
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "settings": settings.model_dump(mode="json"),
        "selection": selection,
        "baseline": baseline,
        "endpoints": {s.label: s.as_dict() for s in result.served},
        "spec_decode_overall": overall,
        "levels": list(levels.values()),
        "divergences": [d.as_dict() for d in result.divergences],
        "near_tie_rule": {**settings.rule.as_dict(), "top_logit_known": settings.baseline_logits},
        "judgement": judgement,
        "degeneracy": degeneracy(evidence or []),
        "evidence": "evidence.parquet",
        "problems": problems,
        "refused": bool(problems),
        "errors": [
            {"call_id": o.call_id, "endpoint": o.endpoint, "concurrency": o.concurrency, "error": o.error}
            for r in result.runs
            for o in r.outcomes
            if not o.ok
        ],
        "calls": [
            {
                "call_id": c.call_id,
                "agent": c.agent,
                "language": c.language,
                "prompt_tokens": c.prompt_tokens,
                "recorded_tokens": c.recorded_tokens,
                "max_tokens": c.max_tokens,
                "via": "token_ids" if c.prompt_ids is not None else "chat",
            }
            for c in calls
        ],
        "results": [
            {
                "call_id": o.call_id,
                "endpoint": o.endpoint,
                "concurrency": o.concurrency,
                "ok": o.ok,
                "completion_tokens": o.completion_tokens,
                "seconds": round(o.seconds, 4),
                "ttft_s": _r(o.ttft),
                "tokens_per_s": _r(o.tokens_per_s, 2),
                "mal": _r(o.spec.mal) if o.spec is not None else None,
                "drafts": o.spec.drafts if o.spec is not None else None,
            }
            for r in result.runs
            for o in r.outcomes
        ],
    }
