"""`trainer plan-memory`: the drafter step run on fake tensors predicts what the same step allocates for real
(held against real tensors at tiny shapes on the CPU), and train.yaml fits an 80 GB H100 for Qwen3-8B."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from transformers import Qwen3Config

from tests.support import REPO_ROOT
from tests.trainer.dflash.tiny import save_tiny, tiny_target
from trainer.config import TrainConfig
from trainer.memplan import GIB, drafter_step, plan, target_config

pytestmark = pytest.mark.slow  # fake and real steps, and three Qwen3-8B-shaped plans

TRAIN_YAML = REPO_ROOT / "trainer/configs/train.yaml"


def tiny_config() -> Qwen3Config:
    return tiny_target(layers=4).model.config


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"activation_checkpointing": True},
        {"drafter": "dspark", "num_layers": 2},
        {"mixed_precision": "no", "max_len": 1000, "step_anchors": 40},
    ],
    ids=["dflash", "checkpointed", "dspark", "float32"],
)
def test_the_fake_step_allocates_what_the_real_one_does(over: dict[str, object]) -> None:
    cfg = TrainConfig(
        **{
            "target": "tiny",
            "num_layers": 1,
            "block_size": 8,
            "max_len": 600,
            "anchors": 8,
            "anchor_tokens": 64,
            "step_anchors": 64,
            "mixed_precision": "bf16",
            **over,
        }
    )
    predicted = drafter_step(cfg, tiny_config())
    measured = drafter_step(cfg, tiny_config(), fake=False)
    assert predicted.keys() == measured.keys()
    for part, want in measured.items():
        assert predicted[part] == pytest.approx(want, rel=0.02), part


def test_train_yaml_fits_an_h100_for_qwen3_8b() -> None:
    """The production config at the released drafter's shape: 32,768 query slots of a 5-layer drafter."""
    cfg = TrainConfig.load(TRAIN_YAML, [])
    qwen = target_config("qwen3-8b")
    assert cfg.activation_checkpointing
    checkpointed = plan(cfg, qwen, gpus=8)
    assert checkpointed.total <= 79 * GIB  # an 'H100 80GB' holds 79.6 GiB
    whole = plan(cfg.model_copy(update={"activation_checkpointing": False}), qwen, gpus=8)
    assert whole.total > checkpointed.total + 20 * GIB  # what checkpointing buys: a layer's activations x 4
    assert checkpointed.parts["target weights"] == pytest.approx(8.19e9 * 2, rel=0.01)  # 8.19B bf16


@pytest.mark.cli
def test_the_command_prints_the_plan_and_refuses_an_unknown_target(tmp_path: Path) -> None:
    folder = save_tiny(tmp_path / "tiny")
    base = [sys.executable, "-m", "trainer", "plan-memory", "--set", "num_layers=1", "--set", "block_size=4"]
    ok = subprocess.run(
        [*base, "--target", str(folder), "--gpu-memory", "2", "--no-search"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "predicted peak per rank" in ok.stdout
    assert "(fits 2 GiB)" in ok.stdout
    bad = subprocess.run(
        [*base, "--target", "no-such-model"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert "no-such-model" in bad.stderr
