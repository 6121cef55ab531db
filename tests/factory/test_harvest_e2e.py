"""`make harvest` on the embedded default, for real: bundled sample, a vLLM CPU server as the target, proxy,
Docker sandboxes running the three real agent CLIs, export — then `make train` on the same data folder, as a
user chains them, its parity gate starting vLLM again with the export. Slow: two rounds of three sessions,
each cut at 180 s (≈ 8–10 min on 2 cores), then a short training run, its evaluation on held-out calls, the
export and the gate (≈ 5 min)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from factory.ingest.sample import load as sample_repos
from records.io import read_table

ROOT = Path(__file__).resolve().parents[2]
# The target both commands use, served by vLLM (from a cached folder). The harvest runs three sessions at once, so every call's prefill
# competes for the 2 cores: SmolLM2 (the default) prefills ≈ 50 tokens/s there, and three agents' 5k-token
# prompts interleaved do not finish within a session's 180 s — every call would end client_disconnected and
# `make train` would have nothing to train on. tiny-qwen3 (real Qwen3 tokenizer and template, random
# weights) prefills an agent's prompt in seconds, so the calls complete; what this test checks is the joint
# between the two commands, not what the drafter learns.
TARGET = "tiny-qwen3"
# The share of sampled calls whose chat view renders to the recorded prompt ids, as measured on this
# harvest (docs/dataset.md, "The chat view"): a change that makes the view less faithful fails here.
CHAT_VIEW_FLOOR = 1.0  # 14 of 14 calls here, and 14 of 14 on the default SmolLM2 harvest


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.cli
@pytest.mark.vllm
def test_make_harvest_then_make_train_then_make_bench_on_the_embedded_default(tmp_path):
    data = tmp_path / "data"
    # MAKEFLAGS/MAKELEVEL: under `make test` this make is nested and would print "Leaving directory" last.
    drop = ("TARGET_URL", "GITHUB_TOKEN", "DFLASH_DB_URL", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HF_DATASETS_OFFLINE"] = env["HF_HUB_OFFLINE"] = "1"
    _harvest(data, env, tmp_path)
    _train(data, env, tmp_path / "runs")
    _bench(data, env, tmp_path / "runs")


def _harvest(data: Path, env: dict[str, str], tmp_path: Path) -> None:
    r = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "harvest",
            f"DATA_DIR={data}",
            # eager vLLM (`--no-compile`): a user's first start compiles for minutes, and a fresh machine (CI)
            # has no compile cache; what this test checks is the joint, not the compiled kernels
            f"HARVEST_ARGS=--limit 6 --concurrency 3 --session-timeout 180 --target-model {TARGET}"
            " --target-arg=--no-compile",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert r.returncode == 0, (r.stdout[-4000:], r.stderr[-4000:])
    summary = json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])
    assert summary["run"]["done"] + summary["run"]["infra_failed"] == 6
    assert "harvest done" in r.stderr
    assert "target starting vLLM" in r.stderr, r.stderr[-3000:]  # the real engine, not the stand-in
    assert "tool calls accepted" in r.stderr  # the up-front check of the target passed

    import datasets

    out = data / "dataset"
    sessions = datasets.load_dataset(str(out), "sessions", cache_dir=str(tmp_path / "hf"))
    calls = datasets.load_dataset(str(out), "calls", cache_dir=str(tmp_path / "hf"))
    srows = [row for split in sessions for row in sessions[split]]
    assert sum(len(calls[split]) for split in calls) > 0
    crows = read_table(out).to_pylist()  # records.io gives request bodies whole (sliced from trajectories)
    assert {(s["agent"], s["lang"]) for s in srows} == {
        (a, lang) for a in ("claude-code", "codex", "opencode") for lang in ("en", "ko")
    }
    # real model calls, recorded by the proxy, from all three agents and in both languages
    assert {c["agent"] for c in crows} == {"claude-code", "codex", "opencode"}
    assert {c["lang"] for c in crows} == {"en", "ko"}
    assert all(
        c["request_json"]
        and c["api"] in ("anthropic_messages", "openai_responses", "openai_chat", "anthropic_count_tokens")
        for c in crows
    )
    assert {c["client_agent"] for c in crows} >= {"claude-code", "codex", "opencode"}
    assert any("이슈" in c["request_json"] for c in crows if c["lang"] == "ko")
    assert (out / "README.md").read_text().count(
        "config_name"
    ) == 4  # calls, trajectories, sequences, sessions
    # Each session ran in its repository's environment image with the sample's tests before and after the
    # agent (tests/factory/test_sample_environments.py checks the same path without a model, in seconds).
    tests = {s.name: s.test for s in sample_repos()}
    ran = [s for s in srows if s["outcome"] != "infra_failed"]
    assert ran
    for s in ran:
        assert s["test_command"] == tests[s["repo"]], s
        assert s["setup_status"] in ("built", "cached"), s
        assert s["baseline_exit_code"] is not None, s
    assert any(s["after_exit_code"] is not None for s in ran)
    assert summary["export"]["exact_ids_fraction"] == 1.0, summary["export"]  # no call lost its exact ids
    # the chat view, rendered with the served template, gives back the ids vLLM recorded (docs/dataset.md)
    chat = json.loads((out / "stats.json").read_text())["chat_check"]
    assert chat["checked"] > 0, chat
    assert chat["share"] >= CHAT_VIEW_FLOOR, chat


def _train(data: Path, env: dict[str, str], runs: Path) -> None:
    """`make train` on what `make harvest` just recorded: the Claude Code calls are trained on (their exact ids
    survived the export) and the evaluation decodes held-out calls. Few epochs and tokens: this checks the
    joint between the two commands, not the drafter's quality (benchmarks/drafter_tau.py measures that)."""
    args = "--set epochs=2 --set eval_prompts=2 --set eval_max_new_tokens=8"
    r = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "train",
            f"DATA_DIR={data}",
            f"RUNS_DIR={runs}",
            f"TARGET_MODEL={TARGET}",
            f"TRAIN_ARGS={args}",
            # tiny-qwen3's random weights continue a prompt with near-random tokens: no drafter, not even the
            # gate's throwaway, accepts enough of them to prove anything, so the gate is explicitly allowed
            # to be inconclusive here, its throwaway trained one pass: the path runs, its verdicts are
            # tests/serving/test_parity_vllm.py's
            "PARITY_ARGS=--allow-inconclusive --probe-steps 1 --prompts 1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert r.returncode == 0, (r.stdout[-4000:], r.stderr[-4000:])
    run = (runs / "latest").resolve()
    report = json.loads((run / "data" / "report.json").read_text())
    assert report["source"].startswith(str(data)), report["source"]  # the harvest, not the bundled sample
    assert report["records"]["kept_by_source"].get("recorded", 0) > 0  # the export's `sequences` config
    assert "prompt_tokens_mismatch" not in report["records"]["excluded"], report["records"]
    trained = report["split"]["train"]["agents"]
    assert trained.get("claude-code", 0) > 0, report["split"]
    assert report["split"]["eval"]["sequences"] > 0, report["split"]
    ev = json.loads((run / "eval.json").read_text())
    assert ev["n_prompts"] > 0
    assert ev["lossless"] is True
    assert (run / "export" / "config.json").exists()
    gate = json.loads((run / "export" / "parity.json").read_text())  # `make train` ran the gate on vLLM
    assert gate["ok"] is True, gate
    assert gate["target"]["ok"] is True, gate  # the target's log-probabilities are vLLM's
    # float32 on both sides, a 1k and a long prompt: the suite's check (a) of the gate against vLLM
    assert gate["target"]["tokens"] > 8000, gate["target"]
    assert gate["target"]["mean_abs_logprob_diff"] < 1e-3, gate["target"]
    assert gate["drafter"]["engine"]["drafts"] > 0  # vLLM drafted with the export
    assert gate["features"]["fidelity"]["ok"], gate["features"]  # the export is the drafter trained
    assert gate["features"]["fidelity"]["blocks"] > 0
    if gate["inconclusive"]:  # said, and the throwaway tried to prove the export path
        assert gate["drafter"]["status"] == "inconclusive"
        assert gate["throwaway"]["status"] != "failed", gate["throwaway"]


def _bench(data: Path, env: dict[str, str], runs: Path) -> None:
    """`make bench` on the run `make train` just made: vLLM servers plain, ngram, suffix and with the export,
    the held-out calls replayed, MAL from vLLM's own counters."""
    r = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "bench",
            f"DATA_DIR={data}",
            f"RUNS_DIR={runs}",
            "BENCH_ARGS=--calls 4 --concurrency 1 --decode-tokens 16",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert r.returncode == 0, (r.stdout[-4000:], r.stderr[-4000:])
    report = json.loads(((runs / "latest").resolve() / "replay" / "report.json").read_text())
    assert list(report["endpoints"]) == ["plain", "ngram", "suffix", "dflash"]
    assert {e["engine"] for e in report["endpoints"].values()} == {"vLLM 0.32.0"}
    judged = report["judgement"]  # a handful of calls: measured, kept, and not ranked
    assert judged["ranked"] is False
    assert "too small to rank" in judged["verdict"]
    assert (runs / "latest" / "replay" / "evidence.parquet").is_file()
    overall = report["spec_decode_overall"]
    assert overall["plain"] is None
    for method in ("ngram", "suffix", "dflash"):
        assert overall[method] is not None, method  # vLLM's spec-decode counters were read for it
    assert overall["dflash"]["drafts"] > 0
    assert not report["problems"], report["problems"]
    assert "| 1 | dflash |" in r.stdout  # the table
