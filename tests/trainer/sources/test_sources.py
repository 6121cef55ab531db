"""The three feature sources give the same taps, bit for bit; numbering mistakes are refused by a check."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lm import Target
from trainer.sources import cache as cache_mod
from trainer.sources import numbering
from trainer.sources.base import FeatureError, prefix_groups
from trainer.sources.cache import CacheSource
from trainer.sources.hf import HFSource
from trainer.sources.numbering import TapNumberingError, from_vllm, to_vllm
from trainer.sources.select import make_source
from trainer.sources.vllm import VllmSourceSettings

from .conftest import extraction_server

TAPS = [0, 2]  # this project's ids for the 4-layer tiny target: outputs of layers 0 and 2
SEQS = [
    [5, 17, 400, 9, 1234, 77, 3, 3, 8],
    [5, 17, 400, 9],  # a prefix of the first: its features come from the first one's request
    [900, 1, 2, 3, 4, 5, 6],
    [42] * 12,
]


def vllm_source(tiny: Target, url: str, launched: list[int], **kw: object):  # type: ignore[no-untyped-def]
    settings = VllmSourceSettings.model_validate({"url": url, "launched_aux_layer_ids": launched, **kw})
    return make_source("vllm", tiny, vllm=settings)


def test_numbering_is_plus_one_with_the_final_layer_appended() -> None:
    assert to_vllm([1, 9, 17, 25, 33], 36) == [2, 10, 18, 26, 34, 36]
    assert from_vllm([2, 10, 18, 26, 34, 36], 36) == [1, 9, 17, 25, 33]
    with pytest.raises(TapNumberingError, match="final layer 36"):
        from_vllm([2, 10, 18], 36)
    with pytest.raises(TapNumberingError, match="out of range"):
        to_vllm([35], 36)  # the last layer's output is never a tap


def test_prefix_groups_point_each_prefix_at_its_longest_extension() -> None:
    assert prefix_groups([[1, 2, 3], [1, 2], [1], [2], [1, 2, 4]]) == [0, 0, 0, 3, 4]


@pytest.mark.slow
def test_hf_cache_and_vllm_give_identical_float32_taps(tiny: Target, tmp_path: Path) -> None:
    hf = HFSource(tiny).taps_many(SEQS, TAPS)
    cache_mod.write(HFSource(tiny), SEQS, TAPS, tmp_path / "features")  # the format `trainer features` writes
    cached = CacheSource(tmp_path / "features").taps_many(SEQS, TAPS)
    with extraction_server(tiny, to_vllm(TAPS, tiny.num_layers), tmp_path / "hs") as url:
        source = vllm_source(tiny, url, to_vllm(TAPS, tiny.num_layers), verify_with_reference=True)
        served = source.taps_many(SEQS, TAPS)
    assert source.requests == 3  # the shared prefix was sent once
    assert not list((tmp_path / "hs").glob("*.safetensors"))  # read, then removed
    for a, b, c, seq in zip(hf, cached, served, SEQS, strict=True):
        assert a.dtype == b.dtype == c.dtype == torch.float32
        assert a.shape == (len(seq), len(TAPS) * tiny.hidden_size)
        assert torch.equal(a, b)
        assert torch.equal(a, c)
    # and the in-loop call shape, [1, T] on a device -> [1, T, n·H]
    ids = torch.tensor([SEQS[2]])
    assert torch.equal(HFSource(tiny).taps(ids, TAPS), CacheSource(tmp_path / "features").taps(ids, TAPS))


def test_a_server_launched_with_unconverted_tap_ids_is_refused(tiny: Target, tmp_path: Path) -> None:
    taps = [1, 2]
    wrong = [*taps, tiny.num_layers]  # this project's numbering handed to vLLM as is
    with extraction_server(tiny, wrong, tmp_path) as url:
        source = vllm_source(tiny, url, wrong)
        with pytest.raises(
            TapNumberingError, match=r"relaunch with eagle_aux_hidden_state_layer_ids=\[2, 3, 4\]"
        ):
            source.taps_many(SEQS[:1], taps)
        assert source.requests == 0  # refused before anything was sent
        with pytest.raises(TapNumberingError, match=r"not inputs of layers 1\.\.3"):
            vllm_source(tiny, url, [*TAPS, tiny.num_layers])  # tap 0 unconverted: aux 0 is the embedding


def test_a_numbering_bug_in_the_conversion_is_caught(
    tiny: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = to_vllm(TAPS, tiny.num_layers)
    monkeypatch.setattr(numbering, "to_vllm", lambda taps, n, **_: [*taps, n])  # the off-by-one bug
    with (
        extraction_server(tiny, right, tmp_path) as url,
        pytest.raises(TapNumberingError, match="extracts aux ids"),
    ):
        vllm_source(tiny, url, right).taps_many(SEQS[:1], TAPS)


def test_a_server_extracting_other_layers_than_it_says_is_caught(tiny: Target, tmp_path: Path) -> None:
    said, actual = to_vllm(TAPS, tiny.num_layers), [*TAPS, tiny.num_layers]
    with (
        extraction_server(tiny, actual, tmp_path) as url,
        pytest.raises(TapNumberingError, match="differ from an in-process forward"),
    ):
        vllm_source(tiny, url, said, verify_with_reference=True).taps_many(SEQS[:1], TAPS)


def test_a_missing_final_layer_is_caught_by_the_generated_token(tiny: Target, tmp_path: Path) -> None:
    said = to_vllm(TAPS, tiny.num_layers)  # [1, 3, 4]
    actual = [1, 3, 3]  # launched without the final layer: the last slot is an inner layer's input
    with (
        extraction_server(tiny, actual, tmp_path) as url,
        pytest.raises(TapNumberingError, match="not the final layer"),
    ):
        vllm_source(tiny, url, said).taps_many(SEQS[:1], TAPS)


def test_the_cache_refuses_sequences_it_does_not_hold(tiny: Target, tmp_path: Path) -> None:
    manifest = cache_mod.write(HFSource(tiny), SEQS[:2], TAPS, tmp_path)
    assert len(manifest["entries"]) == 2  # `cache.write` stores sequences whole (`trainer features` shares)
    source = CacheSource(tmp_path)
    assert source.taps_many([SEQS[1]], TAPS)[0].shape[0] == 4
    with pytest.raises(FeatureError, match="no features"):
        source.taps_many([SEQS[2]], TAPS)
    with pytest.raises(FeatureError, match="holds taps"):
        source.taps_many(SEQS[:1], [1, 2])


def test_the_config_names_exactly_the_registered_sources() -> None:
    import typing

    from trainer.config import TrainConfig
    from trainer.sources.select import SOURCES, kind_of

    assert set(typing.get_args(TrainConfig.model_fields["feature_source"].annotation)) == set(SOURCES)
    assert [n for n, k in SOURCES.items() if k.in_process] == ["hf"]
    with pytest.raises(FeatureError, match="one of hf, cache, vllm"):
        kind_of("gpu")
