"""`trainer regenerate` against a real vLLM CPU server: the engine's own ids stored beside the recorded
rows, marked, held-out calls never re-sampled, resumable without duplicates, and the build trains on both."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lm import Target
from records.io import write_part
from tests.support.tiny import call_rows
from trainer.data.build import build
from trainer.regenerate import RegenerateSettings, run

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def regenerated(data: Path) -> list[dict]:  # type: ignore[type-arg]
    return [r for f in sorted((data / "regenerated").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_regenerate_stores_engine_ids_beside_the_records_and_resumes(
    smollm2: Target, smollm2_vllm: str, tmp_path: Path
) -> None:
    rows = call_rows(smollm2, [24] * 6)  # six repositories: the split holds out whole repositories
    write_part(pa.Table.from_pylist(rows), tmp_path / "calls", "part-0.parquet")
    recorded = {r["call_id"]: r for r in rows}
    s = RegenerateSettings(
        data=tmp_path,
        url=smollm2_vllm,
        samples=2,
        max_tokens=12,
        temperature=0,
        eval_fraction=0.34,
        flush_every=3,
    )
    report = run(s)
    got = regenerated(tmp_path)
    sources = {r["regenerated_from"] for r in got}
    assert report["held_out_skipped"] >= 1
    assert len(sources) == 6 - report["held_out_skipped"]
    assert len(got) == 2 * len(sources) == report["on_disk"]["rows"]
    for r in got:
        src = recorded[r["regenerated_from"]]
        assert r["prompt_token_ids"] == src["prompt_token_ids"]  # the recorded prompt, exactly
        assert r["session_id"] == src["session_id"]
        assert r["agent"] == src["agent"]
        assert 1 <= len(r["completion_token_ids"]) <= 12
        assert r["token_ids_source"] == "upstream"
        # The engine's own greedy ids: each stored token is the engine's top choice given the stored ones before
        # it, up to a near-tie (a re-request alone is batched differently from regenerate's concurrent ones,
        # and on these random-id prompts a float32 near-tie can flip a later token; the suite saw it once).
        completion = r["completion_token_ids"]
        body = {
            "model": "smollm2",
            "prompt": r["prompt_token_ids"] + completion,
            "max_tokens": 1,
            "temperature": 0,
            "prompt_logprobs": 1,
        }
        scored = httpx.post(f"{smollm2_vllm}/v1/completions", json=body, timeout=120).json()
        for tok, row in zip(
            completion, scored["choices"][0]["prompt_logprobs"][-len(completion) :], strict=True
        ):
            entries = {int(k): v for k, v in row.items()}
            assert max(v["logprob"] for v in entries.values()) - entries[tok]["logprob"] < 0.05
    assert report["this_run"]["tokens_per_s"] > 0
    # the recorded calls are untouched: regenerated rows live in their own folder
    assert [r["call_id"] for r in pq.read_table(tmp_path / "calls" / "part-0.parquet").to_pylist()] == list(
        recorded
    )

    # resumed with a third sample at the recorded temperature: only the missing samples are asked for
    more = run(s.model_copy(update={"samples": 3, "temperature": None}))
    assert more["already_done"] == len(got)
    assert more["this_run"]["samples"] == len(sources)
    ids = [r["call_id"] for r in regenerated(tmp_path)]
    assert len(ids) == len(set(ids)) == 3 * len(sources)
    assert json.loads((tmp_path / "regenerated" / "report.json").read_text())["on_disk"]["rows"] == len(ids)

    # and the build trains on both, never on a held-out call's re-samples
    res = build(smollm2, tmp_path, max_len=4096, eval_fraction=0.34)
    assert res.report["regenerated"]["rows"] == len(ids)
    assert res.report["regenerated"]["sequences_trained"] == len(ids)
    assert res.report["regenerated"]["multiplier"] > 1
    assert not {cid for s in res.eval for cid in s.call_ids} & set(ids)
