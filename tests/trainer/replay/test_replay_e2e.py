"""End to end on CPU: held-out calls replayed against the stand-in served plainly and with an overfit
DFlash drafter; the report's MAL is the one the speculative server counted, and outputs are lossless."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.lm.conftest import Live
from tests.support.tiny import call_rows
from tests.trainer.replay.conftest import write_split
from trainer.cli import app
from trainer.replay import ReplaySettings, parse, run_replay

pytestmark = pytest.mark.slow  # tiny-qwen3, an overfit drafter and two servers: ~20-40 s on 2 cores


def cli_args(data: Path, plain: Live, spec: Live, out: Path, *extra: str) -> list[str]:
    """`trainer replay` against the two stand-in servers at concurrency 1."""
    endpoints = ["--endpoint", f"base={plain.url}", "--endpoint", f"dflash={spec.url}"]
    return ["replay", "--data", str(data), *endpoints, "--concurrency", "1", "--out", str(out), *extra]


@pytest.fixture
def held_out(tiny_rows: list[dict], tmp_path: Path) -> Path:  # type: ignore[type-arg]
    """The recorded calls as an export's held-out `test` split."""
    return write_split(tiny_rows, tmp_path / "dataset", "test")


def test_report_mal_is_the_servers_own_and_outputs_equal_the_baseline(
    held_out: Path, plain: Live, spec: Live, tmp_path: Path
) -> None:
    before = parse(httpx.get(f"{spec.url}/metrics").text)
    settings = ReplaySettings(
        data=held_out,
        endpoint=[f"base={plain.url}", f"dflash={spec.url}/v1"],
        calls=4,
        concurrency=[1, 2],
        out=tmp_path / "out",
    )
    report = run_replay(settings)
    after = parse(httpx.get(f"{spec.url}/metrics").text)
    assert before is not None
    assert after is not None
    served = after - before
    stats = spec.server.engine.strategy.spec_stats
    assert stats is not None

    overall = report["spec_decode_overall"]["dflash"]
    assert overall["drafts"] == served.drafts == stats.num_drafts > 0
    assert overall["mal"] == pytest.approx(1 + stats.num_accepted_tokens / stats.num_drafts, abs=1e-4)
    assert overall["mal"] > 1  # overfit (briefly, to stay fast): some drafts accepted
    assert report["spec_decode_overall"]["base"] is None  # the plain server exposes no spec counters
    assert len(overall["per_position_acceptance"]) == 3  # block 4: three draft positions

    assert not report["refused"], report["problems"]
    # the stand-in imitates vLLM's cards; the report still says which engine served each row
    assert report["endpoints"]["dflash"]["engine"] == "stand-in (dflash)"
    assert report["endpoints"]["base"]["engine"] == "stand-in (autoregressive)"
    levels = {lv["concurrency"]: lv["endpoints"] for lv in report["levels"]}
    assert set(levels) == {1, 2}
    for eps in levels.values():
        assert eps["dflash"]["outputs_compared"] == 4
        assert eps["dflash"]["outputs_differ"] == 0
        assert eps["dflash"]["speedup"] is not None
        assert eps["dflash"]["speedup"] > 0
        assert eps["base"]["failed"] == eps["dflash"]["failed"] == 0
    # per call counters at concurrency 1 add up to the level's, and give MAL per agent × language
    groups = levels[1]["dflash"]["groups"]
    assert set(groups) == {"claude-code/en", "codex/en", "claude-code/ko", "codex/ko"}
    assert all(g["mal"] is not None and g["mal"] >= 1 for g in groups.values())
    level1 = levels[1]["dflash"]["spec"]
    per_call = [r["mal"] for r in report["results"] if r["endpoint"] == "dflash" and r["concurrency"] == 1]
    assert len(per_call) == 4
    assert all(m is not None for m in per_call)
    assert level1["drafts"] > 0

    out = tmp_path / "out"
    saved = json.loads((out / "report.json").read_text())
    assert saved["spec_decode_overall"]["dflash"]["mal"] == overall["mal"]
    assert "| 1 | dflash |" in (out / "summary.md").read_text()
    assert (out / "mal_speedup.png").stat().st_size > 0
    assert (out / "acceptance.png").stat().st_size > 0

    # the evidence: every call's output ids and counters, beside the report, adding up to its figures
    evidence = pq.read_table(out / "evidence.parquet").to_pylist()
    assert len(evidence) == 4 * 2 * 2  # calls × endpoints × levels
    mine = [r for r in evidence if r["endpoint"] == "dflash" and r["concurrency"] == 1]
    assert sum(r["drafts"] for r in mine) == level1["drafts"]
    assert all(len(r["output_token_ids"]) == r["completion_tokens"] for r in evidence)
    assert all(0 < r["distinct_4gram_ratio"] <= 1 for r in evidence)
    judged = saved["judgement"]
    assert judged["calls"] == 4
    assert judged["methods"]["dflash"]["draft_steps"] == level1["drafts"]
    assert judged["ranked"] is False  # a handful of draft steps is below the floor of 1,000
    assert "too small to rank" in judged["verdict"]
    assert "Not ranked: too small to rank" in (out / "summary.md").read_text()
    assert (out / "judgement.png").stat().st_size > 0


def test_a_fixed_decode_budget_and_a_ranking_asked_below_the_floor_exits_3(
    held_out: Path, plain: Live, spec: Live, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = cli_args(held_out, plain, spec, out, "--decode-tokens", "20", "--rank")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "NOT RANKED — too small to rank: dflash" in result.output
    report = json.loads((out / "report.json").read_text())
    assert {c["max_tokens"] for c in report["calls"]} == {20}  # not the recorded 12
    evidence = pq.read_table(out / "evidence.parquet").to_pylist()
    assert all(r["max_tokens"] == 20 for r in evidence)
    assert any(r["completion_tokens"] > 12 for r in evidence)  # decoded past the recorded length


def test_the_cli_prints_the_table_and_a_too_long_prompt_fails_alone(
    tiny,
    tiny_rows: list[dict],
    plain: Live,
    spec: Live,
    tmp_path: Path,  # type: ignore[no-untyped-def, type-arg]
) -> None:
    long = call_rows(tiny, [300], seed=1)[0]  # the servers' context is 256 tokens
    long["call_id"] = "too-long"
    data = write_split([*tiny_rows[:2], long], tmp_path / "dataset", "test")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, cli_args(data, plain, spec, out))
    assert result.exit_code == 0, result.output
    assert result.exception is None  # the runner keeps an escaped exception here, never in the output
    assert "| 1 | dflash |" in result.output
    assert (
        "too-long on base (concurrency 1): HTTP 400: This model's maximum context length is 256 tokens"
        in result.output
    )
    report = json.loads((out / "report.json").read_text())
    assert {e["call_id"] for e in report["errors"]} == {"too-long"}
    assert report["levels"][0]["endpoints"]["dflash"]["ok"] == 2  # the other calls were replayed
