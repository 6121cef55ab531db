"""The vllm source when the trainer holds only the target's shared weights (a target that lives in vLLM):
the features are the server's, and the appended final layer is still checked — through the final norm
read by name from the target's safetensors and the LM head."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lm.loading import load_shared_weights
from tests.trainer.dflash.tiny import MASK, save_tiny, tiny_target, write_calls
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.features import features
from trainer.sources.base import FeatureError
from trainer.sources.cache import CacheSource
from trainer.sources.hf import HFSource
from trainer.sources.numbering import TapNumberingError, to_vllm
from trainer.sources.select import make_source
from trainer.sources.vllm import VllmSourceSettings

from .conftest import extraction_server

TAPS = [0, 2]
SEQS = [[5, 17, 200, 9, 123, 77, 3, 3, 8], [90, 1, 2, 3, 4, 5, 6]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny"))


def test_a_light_target_trains_on_the_servers_features_with_the_final_layer_checked(
    model_dir: Path, tmp_path: Path
) -> None:
    full, light = tiny_target(layers=4), load_shared_weights(str(model_dir))
    aux = to_vllm(TAPS, 4)
    with extraction_server(full, aux, tmp_path / "ok") as url:
        source = make_source(
            "vllm", light, vllm=VllmSourceSettings.model_validate({"url": url, "launched_aux_layer_ids": aux})
        )
        assert source.head is not None  # type: ignore[attr-defined]  # the norm was read by name
        got = source.taps_many(SEQS, TAPS)
    want = HFSource(full).taps_many(SEQS, TAPS)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    with extraction_server(full, [1, 3, 3], tmp_path / "bad") as url:  # launched without the final layer
        source = make_source(
            "vllm", light, vllm=VllmSourceSettings.model_validate({"url": url, "launched_aux_layer_ids": aux})
        )
        with pytest.raises(TapNumberingError, match="not the final layer"):
            source.taps_many(SEQS[:1], TAPS)
    with pytest.raises(FeatureError, match="whole target"):
        make_source(
            "vllm",
            light,
            vllm=VllmSourceSettings.model_validate(
                {"url": url, "launched_aux_layer_ids": aux, "verify_with_reference": True}
            ),
        )


def test_features_from_a_server_store_its_taps_with_only_the_shared_weights_loaded(
    model_dir: Path, tmp_path: Path
) -> None:
    """`python -m trainer features` with `feature_source: vllm`: the server computes, the trainer holds only
    the shared weights, and each segment's rows past its shared prefix are what gets stored."""
    full = tiny_target(layers=4)
    calls = write_calls(full, tmp_path / "calls.parquet", sessions=2, calls=2, new_tokens=8)
    aux = to_vllm(TAPS, 4)
    with extraction_server(full, aux, tmp_path / "hs") as url:
        cfg = TrainConfig(
            target=str(model_dir),
            data=str(calls),
            runs_dir=str(tmp_path / "runs"),
            num_layers=1,
            target_layer_ids=TAPS,
            mask_token_id=MASK,
            eval_fraction=0.3,
            feature_source="vllm",
            vllm={"url": url, "launched_aux_layer_ids": aux},
        )
        made = features(cfg, tmp_path / "features", dtype="float32")
    seqs = [s.input_ids for s in data_build.read(tmp_path / "features/data/train.parquet")]
    got = CacheSource(tmp_path / "features").taps_many(seqs, TAPS)
    want = HFSource(full).taps_many(seqs, TAPS)
    assert made["written"] == len(made["shards"])
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
