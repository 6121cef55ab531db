"""The replay's parts without servers: counters from /metrics text, held-out selection, the stratified
sample, refusals in the report."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.replay.calls import ReplayCall, ReplayError, load_calls, stratified
from trainer.replay.client import Outcome
from trainer.replay.counters import SpecCounters, parse
from trainer.replay.divergence import Divergence
from trainer.replay.report import build_report
from trainer.replay.run import LevelRun, ReplayRun, Served, check_same_model
from trainer.replay.settings import ReplaySettings

PAGE = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 10.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 60.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 15.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 10.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 5.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{model_name="m"} 123.0
"""


def test_counters_are_read_summed_over_engines_and_differenced() -> None:
    c = parse(PAGE)
    assert c == SpecCounters(20.0, 60.0, 30.0, (15.0, 10.0, 5.0))
    assert c.mal == pytest.approx(2.5)
    assert c.per_position == [0.75, 0.5, 0.25]
    assert parse(PAGE, model="other") is None  # another model's counters are not this one's
    assert parse("# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total 1.0\n") is None
    delta = c - SpecCounters(10.0, 30.0, 10.0, (8.0, 2.0))
    assert delta == SpecCounters(10.0, 30.0, 20.0, (7.0, 8.0, 5.0))
    assert delta.mal == pytest.approx(3.0)
    assert SpecCounters().mal is None


def _rows(n: int) -> list[dict]:  # type: ignore[type-arg]
    agents, langs = ["claude-code", "codex", "opencode"], ["en", "ko"]
    return [
        {
            "call_id": f"c{i}",
            "session_id": f"s{i}",
            "repo": f"org/r{i % 5}",
            "agent": agents[i % 3],
            "lang": langs[(i // 3) % 2],
            "api": "openai_chat",
            "status_code": 200,
            "outcome": "ok",
            "prompt_token_ids": [1, 2, 3 + i],
            "completion_token_ids": list(range(5 + i)),
            "completion_tokens": 5 + i,
            "request_json": "{}",
        }
        for i in range(n)
    ]


def _write(tmp: Path, name: str, rows: list[dict]) -> Path:  # type: ignore[type-arg]
    folder = tmp / "data" / "calls"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / name)
    return tmp


def test_an_export_replays_its_test_split_and_refuses_one_without(tmp_path: Path) -> None:
    rows = _rows(12)
    _write(tmp_path / "a", "train-00000-of-00001.parquet", rows[:8])
    data = _write(tmp_path / "a", "test-00000-of-00001.parquet", rows[8:])
    calls, summary = load_calls(data, n=24, seed=0, cap=6)
    assert sorted(c.call_id for c in calls) == ["c10", "c11", "c8", "c9"]
    assert summary["held_out_by"] == "the dataset's test split"
    assert all(c.max_tokens == min(6, c.recorded_tokens) for c in calls)
    only_train = _write(tmp_path / "b", "train-00000-of-00001.parquet", rows)
    with pytest.raises(ReplayError, match=r"has no held-out calls: its files are the \['train'\] split only"):
        load_calls(only_train, n=24, seed=0, cap=6)


def test_a_calls_folder_is_held_out_by_the_run_or_by_the_trainers_hash(tmp_path: Path) -> None:
    data = _write(tmp_path / "calls", "part-0.parquet", _rows(20))
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist([{"call_ids": ["c3", "c4"]}, {"call_ids": ["c7"]}]),
        run / "data" / "eval.parquet",
    )
    calls, _ = load_calls(data, n=24, seed=0, cap=64, run_dir=run)
    assert sorted(c.call_id for c in calls) == ["c3", "c4", "c7"]
    hashed, summary = load_calls(data, n=24, seed=0, cap=64, fraction=0.15)
    repos = {f"org/r{int(c.call_id[1:]) % 5}" for c in hashed}
    assert 0 < len(repos) < 5  # whole repositories, never all of them
    assert "whole repositories held out" in summary["held_out_by"]
    with pytest.raises(ReplayError, match=r"no .*eval\.parquet"):
        load_calls(data, n=24, seed=0, cap=64, run_dir=tmp_path / "nothing")


def test_the_sample_is_even_over_agent_and_language_and_seeded() -> None:
    calls = [
        ReplayCall(f"c{i}", agent, lang, 8, 8, [1])
        for i, (agent, lang) in enumerate([("a", "en")] * 10 + [("b", "en")] * 3 + [("a", "ko")] * 2)
    ]
    picked = stratified(calls, 6, seed=1)
    groups = [c.group for c in picked]
    assert groups.count("a/ko") == 2
    assert groups.count("b/en") == 2
    assert groups.count("a/en") == 2
    assert [c.call_id for c in picked] == [c.call_id for c in stratified(calls, 6, seed=1)]
    assert [c.call_id for c in picked] != [c.call_id for c in stratified(calls, 6, seed=2)]


def test_different_models_are_refused() -> None:
    a = Served("base", "http://a", "m", "org/model-a", 4096, False, False)
    b = Served("dflash", "http://b", "m", "org/model-b", 4096, True, True)
    with pytest.raises(ReplayError, match="serve different models"):
        check_same_model([a, b])


def test_differing_greedy_outputs_are_counted_and_refused(tmp_path: Path) -> None:
    settings = ReplaySettings(data=tmp_path, endpoint=["base=http://a", "dflash=http://b"], concurrency=[1])
    calls = [ReplayCall(f"c{i}", "a", "en", 4, 4, [1, 2]) for i in range(3)]

    def outs(label: str, ids: list[list[int]]) -> list[Outcome]:
        return [
            Outcome(f"c{i}", label, 1, "a/en", token_ids=t, completion_tokens=4, seconds=1.0)
            for i, t in enumerate(ids)
        ]

    spec = SpecCounters(6, 18, 9, (4, 3, 2))
    runs = [
        LevelRun("base", 1, outs("base", [[1], [2], [3]]), 3.0, None),
        LevelRun("dflash", 1, outs("dflash", [[1], [9], [3]]), 2.0, spec),
    ]
    served = [
        Served("base", "http://a", "m", "m", None, False, False),
        Served("dflash", "http://b", "m", "m", None, True, True),
    ]
    mismatch = Divergence("c1", "dflash", 1, 0, 2, 9, 3.5, "mismatch")
    report = build_report(settings, {"sampled": 3}, calls, ReplayRun(served, runs, divergences=[mismatch]))
    dflash = report["levels"][0]["endpoints"]["dflash"]
    assert (dflash["outputs_differ"], dflash["outputs_compared"], dflash["differing_calls"]) == (1, 3, ["c1"])
    assert (dflash["mismatches"], dflash["near_ties"]) == (1, 0)
    assert report["refused"]
    assert "1 of 3 greedy outputs of dflash differ from base's" in report["problems"][0]
    assert dflash["spec"]["mal"] == 2.5
    assert dflash["speedup"] == 1.0  # same tokens in the same request time
    # the same divergence at a near-tie of the target's top-2 is rounding: reported, not refused
    tie = Divergence("c1", "dflash", 1, 0, 2, 9, 0.01, "near_tie")
    report = build_report(settings, {"sampled": 3}, calls, ReplayRun(served, runs, divergences=[tie]))
    assert not report["refused"]
    assert report["levels"][0]["endpoints"]["dflash"]["near_ties"] == 1


def test_a_row_without_ids_is_replayed_by_its_chat_body() -> None:
    from trainer.replay.calls import to_call
    from trainer.replay.client import request_for

    row = {
        "call_id": "a1",
        "agent": "claude-code",
        "lang": "en",
        "api": "anthropic_messages",
        "status_code": 200,
        "outcome": "ok",
        "completion_tokens": 9,
        "request_json": '{"model": "x", "max_tokens": 99, "system": "be brief", '
        '"messages": [{"role": "user", "content": "hi"}]}',
    }
    call = to_call(row, cap=4)
    assert call is not None
    assert call.prompt_ids is None
    path, body = request_for(call, "served")
    assert path == "/v1/chat/completions"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("served", 4, 0)
    with_ids = to_call({**row, "prompt_token_ids": [5, 6], "completion_token_ids": [1, 2, 3]}, cap=4)
    assert with_ids is not None
    assert request_for(with_ids, "served") == (
        "/v1/completions",
        {
            "model": "served",
            "max_tokens": 3,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "prompt": [5, 6],
        },
    )
    assert to_call({**row, "status_code": 500}, cap=4) is None  # failed calls are not replayed
