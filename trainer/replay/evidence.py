"""The replay's raw evidence: one row per call, endpoint and concurrency level, in OUT/evidence.parquet.

A table of MALs is only as good as what it was measured on, so every figure can be recomputed from this
file: the output token ids, the spec-decode counters' change around the call (concurrency 1: drafts,
draft tokens, accepted, accepted at each position), the prompt's length, agent and language, and two
degeneracy figures of the output — a target decoding past the range it was trained on loops, and a loop is
what n-gram lookup predicts best, so a ranking over degenerate outputs ranks nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trainer.replay.calls import ReplayCall
from trainer.replay.run import ReplayRun

MAX_PERIOD = 8  # tokens: the longest cycle `longest_repeat_run` looks for


def distinct_ngram_ratio(ids: list[int], n: int = 4) -> float | None:
    """Distinct n-grams over all n-grams of `ids` (1.0: no n-gram repeats; near 0: a loop)."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def longest_repeat_run(ids: list[int], max_period: int = MAX_PERIOD) -> int:
    """The longest stretch of `ids` that repeats itself with a period of at most `max_period` tokens
    ("a a a a" and "x y x y x y" alike), counted in tokens; 0 when nothing repeats."""
    best = 0
    for p in range(1, max_period + 1):
        run = 0
        for i in range(p, len(ids)):
            run = run + 1 if ids[i] == ids[i - p] else 0
            if run:
                best = max(best, run + p)
    return best


SCHEMA = pa.schema(
    [
        ("call_id", pa.string()),
        ("endpoint", pa.string()),
        ("concurrency", pa.int32()),
        ("agent", pa.string()),
        ("language", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("max_tokens", pa.int32()),
        ("ok", pa.bool_()),
        ("error", pa.string()),
        ("output_token_ids", pa.list_(pa.int32())),
        ("completion_tokens", pa.int32()),
        ("seconds", pa.float64()),
        ("ttft_s", pa.float64()),
        ("drafts", pa.float64()),
        ("draft_tokens", pa.float64()),
        ("accepted_tokens", pa.float64()),
        ("accepted_per_position", pa.list_(pa.float64())),
        ("distinct_4gram_ratio", pa.float64()),
        ("longest_repeat_run", pa.int32()),
    ]
)


def rows(calls: list[ReplayCall], result: ReplayRun) -> list[dict[str, Any]]:
    by_id = {c.call_id: c for c in calls}
    out = []
    for run in result.runs:
        for o in run.outcomes:
            c = by_id[o.call_id]
            ids = o.token_ids or []
            out.append(
                {
                    "call_id": o.call_id,
                    "endpoint": o.endpoint,
                    "concurrency": o.concurrency,
                    "agent": c.agent,
                    "language": c.language,
                    "prompt_tokens": c.prompt_tokens,
                    "max_tokens": c.max_tokens,
                    "ok": o.ok,
                    "error": o.error,
                    "output_token_ids": o.token_ids,
                    "completion_tokens": o.completion_tokens,
                    "seconds": o.seconds,
                    "ttft_s": o.ttft,
                    "drafts": o.spec.drafts if o.spec else None,
                    "draft_tokens": o.spec.draft_tokens if o.spec else None,
                    "accepted_tokens": o.spec.accepted if o.spec else None,
                    "accepted_per_position": list(o.spec.per_pos) if o.spec else None,
                    "distinct_4gram_ratio": distinct_ngram_ratio(ids),
                    "longest_repeat_run": longest_repeat_run(ids),
                }
            )
    return out


def write(evidence: list[dict[str, Any]], path: Path) -> Path:
    pq.write_table(pa.Table.from_pylist(evidence, schema=SCHEMA), path)
    return path


def degeneracy(evidence: list[dict[str, Any]]) -> dict[str, dict[str, float | int | None]]:
    """Per endpoint: mean distinct-4-gram ratio and the longest repeated run of its answered outputs."""
    out: dict[str, dict[str, float | int | None]] = {}
    for label in dict.fromkeys(r["endpoint"] for r in evidence):
        mine = [r for r in evidence if r["endpoint"] == label and r["ok"]]
        ratios = [r["distinct_4gram_ratio"] for r in mine if r["distinct_4gram_ratio"] is not None]
        out[label] = {
            "outputs": len(mine),
            "mean_distinct_4gram_ratio": round(sum(ratios) / len(ratios), 4) if ratios else None,
            "max_longest_repeat_run": max((r["longest_repeat_run"] for r in mine), default=None),
        }
    return out
