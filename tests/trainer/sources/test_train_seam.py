"""Training asks the seam for its features: the same run fed by `hf`, `cache` and `vllm` (the stand-in
extraction server) takes the same steps, loss for loss. (With prefix sharing the hf path continues a KV
cache instead of a whole forward: the same features up to float rounding, so it is compared separately.)"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch

from tests.trainer.dflash.tiny import tiny_config, tiny_target, write_calls
from trainer.features import features
from trainer.sources.cache import CacheSource
from trainer.sources.numbering import to_vllm
from trainer.train import train

from .conftest import extraction_server

pytestmark = pytest.mark.slow


def losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_three_sources_train_identically(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    target = tiny_target(layers=4)
    calls = write_calls(target, tmp_path / "calls.parquet", sessions=3, calls=2, new_tokens=16)
    base = dict(
        eval_fraction=0.1,
        max_steps=3,
        anchors=16,
        target_layer_ids=[0, 2],
        prefix_sharing=False,  # hf then taps each whole sequence, as the sources do
    )
    hf_run = train(tiny_config("tiny", calls, tmp_path / "runs", **base, name="hf"), target=target)
    # `python -m trainer write-features RUN OUT`: the run's config and built data
    features(
        tiny_config("tiny", calls, tmp_path / "runs", **base),
        tmp_path / "features",
        dtype="float32",
        data_dir=hf_run / "data",
        target=target,
    )
    read_on: list[str] = []
    tails = CacheSource.taps_tails

    def recorded(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        read_on.append(threading.current_thread().name)
        return tails(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CacheSource, "taps_tails", recorded)
        cache_run = train(
            tiny_config(
                "tiny",
                calls,
                tmp_path / "runs",
                **base,
                name="cache",
                feature_source="cache",
                feature_dir=str(tmp_path / "features"),
            ),
            target=target,
        )
    # read ahead on the reader thread while the step before trained (an epoch's first step: here)
    assert any(name.startswith("feature-reader") for name in read_on), read_on
    aux = to_vllm([0, 2], target.num_layers)
    with extraction_server(target, aux, tmp_path / "hs") as url:
        vllm = {"url": url, "launched_aux_layer_ids": aux, "verify_with_reference": True}
        vllm_run = train(
            tiny_config(
                "tiny", calls, tmp_path / "runs", **base, name="vllm", feature_source="vllm", vllm=vllm
            ),
            target=target,
        )
    assert len(losses(hf_run)) == 3
    assert losses(hf_run) == losses(cache_run) == losses(vllm_run)
