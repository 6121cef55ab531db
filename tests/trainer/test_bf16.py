"""The trainer's one code path under bf16 mixed precision, on the CPU (accelerate's CPU bf16): training,
held-out evaluation, `trainer features` and `trainer eval` — the code a GPU runs with `mixed_precision:
auto`. The target is the tiny Qwen3 saved to a folder (as a user's checkpoint is loaded)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate.state import AcceleratorState

from tests.trainer.dflash.tiny import save_tiny, tiny_config, tiny_target, write_calls
from trainer.evaluate import evaluate
from trainer.features import features
from trainer.train import TrainConfig, train

# bf16 keeps 8 bits of mantissa: the same step's loss differs from float32's by rounding only. Measured
# on `make train`'s first step (SmolLM2): 66.92 vs 66.88, 0.06 %; 2 % leaves room for other CPUs' kernels, and still catches a wrong dtype path
# (an fp32/bf16 mix-up either crashes or changes the loss by far more).
LOSS_RTOL = 2e-2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("calls") / "calls.parquet"
    return write_calls(tiny_target(layers=4), path, sessions=5, calls=2, new_tokens=16)


@pytest.fixture(autouse=True)
def _fresh_accelerator_state() -> Any:
    yield
    AcceleratorState._reset_state()  # the next test file's Accelerator picks its own precision


def run(cfg: TrainConfig) -> Path:
    # accelerate keeps one AcceleratorState per process, fixed by the first Accelerator: these tests
    # train in several precisions in one process, so each run starts from a fresh one (the process
    # group, PartialState, is kept)
    AcceleratorState._reset_state()
    return train(cfg)


def config(model_dir: Path, calls: Path, runs: Path, **kw: Any) -> TrainConfig:
    base = dict(max_steps=3, anchors=16, target_layer_ids=[0, 2], eval_every=3, eval_prompts=2)
    return tiny_config(str(model_dir), calls, runs, **{**base, "eval_max_new_tokens": 12, **kw})


def _metrics(run: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


def test_bf16_trains_evaluates_and_matches_float32(model_dir: Path, calls: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    fp32 = run(config(model_dir, calls, tmp_path / "runs", name="fp32", mixed_precision="no"))
    bf16 = run(config(model_dir, calls, tmp_path / "runs", name="bf16", mixed_precision="bf16"))
    a, b = _metrics(fp32, "metrics.jsonl"), _metrics(bf16, "metrics.jsonl")
    assert len(a) == len(b) == 3
    assert b[0]["loss"] == pytest.approx(a[0]["loss"], rel=LOSS_RTOL)  # the same first step
    assert all(math.isfinite(r["loss"]) for r in b)
    [held] = _metrics(bf16, "heldout.jsonl")  # the held-out evaluation ran under bf16 too
    assert held["step"] == 3
    assert math.isfinite(held["loss"])
    assert held["blocks"] > 0

    # `trainer eval --dtype bfloat16`: the target in bf16, speculative decoding judged by its own greedy
    result = evaluate(bf16, device="cpu", dtype="bfloat16", progress=False, out_dir=tmp_path / "eval")
    assert result["dtype"] == "bfloat16"
    assert result["n_prompts"] == 2
    # tau is what the bf16 decodes settled, and the engine's counters say the same
    rows = result["prompts"]
    steps = sum(r["verify_steps"] for r in rows)
    assert steps > 0
    assert result["tau"] == pytest.approx(sum(r["tau"] * r["verify_steps"] for r in rows) / steps, abs=1e-3)
    accepted = sum(result["per_position_acceptance"]) * result["num_drafts"]
    assert accepted == pytest.approx(result["num_accepted_tokens"], abs=0.01 * result["num_drafts"])
    assert result["acceptance_length"] == pytest.approx(1 + sum(result["per_position_acceptance"]), abs=1e-3)
    assert result["lossless"] is True  # no divergence beyond a near-tie
    assert result["mismatch_rate"] == 0.0
    assert set(result["divergences"]) == {"near_tie", "mismatch"}
    assert result["divergences"]["mismatch"] == 0  # counted over every prompt's divergences
    assert all(r["divergence"] in (None, "near_tie") for r in result["prompts"])


def test_bf16_features_feed_bf16_training(model_dir: Path, calls: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    cfg = config(model_dir, calls, tmp_path / "runs", mixed_precision="bf16")
    made = features(cfg, tmp_path / "features", dtype="bfloat16")
    assert made["dtype"] == "bfloat16"
    assert made["written"] == len(made["shards"])
    cached = run(
        config(
            model_dir,
            calls,
            tmp_path / "runs",
            name="cached",
            mixed_precision="bf16",
            feature_source="cache",
            feature_dir=str(tmp_path / "features"),
        )
    )
    assert all(math.isfinite(r["loss"]) for r in _metrics(cached, "metrics.jsonl"))
