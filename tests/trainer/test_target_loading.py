"""The target is read straight into the training dtype on its device; training loads it that way."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, Qwen3Config

from lm.loading import context_limit, load_target
from tests.trainer.dflash.tiny import save_tiny


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny"))


def test_a_model_directory_loads_in_the_dtype_asked(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made_float32 = []
    original = torch.nn.Module.float

    def spy(self: torch.nn.Module) -> torch.nn.Module:
        made_float32.append(type(self).__name__)
        return original(self)

    monkeypatch.setattr(torch.nn.Module, "float", spy)
    target = load_target(str(model_dir), dtype=torch.bfloat16, device="cpu")
    assert {p.dtype for p in target.model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in target.model.parameters()} == {"cpu"}
    assert not made_float32  # never converted through a float32 copy
    taps = target.tap(torch.tensor([[1, 2, 3]]), [0, 2])
    assert taps.dtype == torch.bfloat16
    assert taps.shape == (1, 3, 2 * target.hidden_size)


def test_the_default_is_still_float32_for_the_stand_in_server(model_dir: Path) -> None:
    target = load_target(str(model_dir))
    assert {p.dtype for p in target.model.parameters()} == {torch.float32}


def test_builtin_tiny_target_honours_the_dtype() -> None:
    target = load_target("tiny-qwen3", dtype=torch.bfloat16)
    assert {p.dtype for p in target.model.parameters()} == {torch.bfloat16}


def test_a_device_map_places_the_layers_and_the_taps_come_back_together(model_dir: Path) -> None:
    """`target_device_map` (accelerate's big-model placement, for an online target larger than one GPU).
    No second device exists here, so every layer is mapped by name to the CPU: what is checked is that a
    mapped target is left where the map put it (no `.to()` after) and taps the same as a plain load."""
    names = {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    mapped = load_target(
        str(model_dir), device_map={**names, **{f"model.layers.{i}": "cpu" for i in range(4)}}
    )
    assert {p.device.type for p in mapped.model.parameters()} == {"cpu"}
    plain = load_target(str(model_dir))
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.equal(mapped.tap(ids, [0, 3]), plain.tap(ids, [0, 3]))


def test_the_context_limit_is_the_served_one_under_rope_scaling() -> None:
    assert context_limit(Qwen3Config(max_position_embeddings=40960)) == 40960
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1e6}
    assert (
        context_limit(Qwen3Config(max_position_embeddings=40960, rope_scaling=yarn)) == 131072
    )  # Qwen3 + YaRN
    linear = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    assert context_limit(LlamaConfig(max_position_embeddings=4096, rope_scaling=linear)) == 8192
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 5e5,
    }
    assert context_limit(LlamaConfig(max_position_embeddings=131072, rope_scaling=llama3)) == 131072
