"""RoPE generality: the drafter rotates exactly like a scaled target, and refuses one it cannot match."""

from __future__ import annotations

import pytest
import torch
from transformers import Glm4MoeConfig, LlamaConfig, Qwen3Config
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

from tests.trainer.dflash.tiny import tiny_target
from trainer.dflash.config import config_dict, make_draft_config
from trainer.dflash.engine import check_compatible
from trainer.dflash.model import DFlashDraftModel

SMALL = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4, vocab_size=256
)


def _same_rotation(drafter: DFlashDraftModel, reference: torch.nn.Module) -> None:
    x = torch.zeros(1, 3, 16)
    pos = torch.tensor([[0, 5_000, 100_000]])  # past the original context, where scaling matters
    cos_d, sin_d = drafter.rotary_emb(x, pos)
    cos_t, sin_t = reference(x, pos)
    assert torch.allclose(cos_d, cos_t)
    assert torch.allclose(sin_d, sin_t)


def test_a_llama3_scaled_target_is_rotated_the_same_and_exported_with_its_scaling() -> None:
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    target = LlamaConfig(**SMALL, rope_theta=500_000.0, rope_scaling=scaling, max_position_embeddings=131_072)
    cfg = make_draft_config(target, num_hidden_layers=1, block_size=8, mask_token_id=255)
    drafter = DFlashDraftModel(cfg)
    _same_rotation(drafter, LlamaRotaryEmbedding(target))
    exported = config_dict(cfg)
    assert exported["rope_theta"] == 500_000.0
    assert exported["rope_scaling"]["rope_type"] == "llama3"
    assert exported["rope_scaling"]["factor"] == 8.0


def test_a_yarn_target_keeps_its_attention_scaling() -> None:
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32_768, "rope_theta": 1e6}
    target = Qwen3Config(**SMALL, head_dim=16, rope_parameters=yarn, max_position_embeddings=131_072)
    drafter = DFlashDraftModel(
        make_draft_config(target, num_hidden_layers=1, block_size=8, mask_token_id=255)
    )
    reference = Qwen3RotaryEmbedding(target)
    assert reference.attention_scaling != 1.0  # YaRN scales cos/sin: the drafter must too
    _same_rotation(drafter, reference)


def test_a_glm4_moe_shaped_target_with_partial_rotary_is_refused_clearly() -> None:
    target = Glm4MoeConfig(
        **SMALL,
        head_dim=16,
        num_key_value_heads=2,
        n_routed_experts=4,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
    )
    assert target.rope_parameters["partial_rotary_factor"] == 0.5  # GLM-4's own default
    with pytest.raises(ValueError, match=r"partial_rotary_factor 0\.5"):
        make_draft_config(target, num_hidden_layers=1, block_size=8, mask_token_id=255)


def test_an_unknown_rope_type_is_refused() -> None:
    target = Qwen3Config(**SMALL, head_dim=16, rope_parameters={"rope_type": "mrope", "rope_theta": 1e4})
    with pytest.raises(ValueError, match="RoPE type 'mrope'"):
        make_draft_config(target, num_hidden_layers=1, block_size=8, mask_token_id=255)


def test_serving_refuses_a_drafter_trained_with_other_rope_scaling() -> None:
    target = tiny_target()
    scaled = Qwen3Config(
        **{
            **target.model.config.to_dict(),
            "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10_000.0},
        }
    )
    drafter = DFlashDraftModel(
        make_draft_config(scaled, num_hidden_layers=1, block_size=8, mask_token_id=255)
    )
    with pytest.raises(ValueError, match="RoPE rope_type linear != target's default"):
        check_compatible(drafter, target)
    check_compatible(
        DFlashDraftModel(
            make_draft_config(target.model.config, num_hidden_layers=1, block_size=8, mask_token_id=255)
        ),
        target,
    )
