"""Each drafter kind's export, loaded by vLLM 0.32's own model class and weight loader: every tensor
consumed, no parameter left unloaded (vLLM does not check that itself), embeddings and LM head shared from
the target. DFlash is also decoded by vLLM CPU (tests/serving/test_parity_vllm.py); DSpark cannot be on
this CPU, and the test pins vLLM's own refusal, so a vLLM CPU that learns to serve it is noticed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from serving.drafter_load import vllm_load
from standin import Target
from trainer.dflash.config import make_draft_config, resolve_mask_token
from trainer.dflash.dspark import DSparkDraftModel, dspark_config
from trainer.dflash.kinds import KINDS, drafted_tokens, kind_of
from trainer.dflash.model import DFlashDraftModel

pytestmark = pytest.mark.vllm


def saved(kind: str, tiny: Target, out: Path) -> Path:
    mask, _ = resolve_mask_token(tiny.tokenizer, tiny.embed_tokens.weight.shape[0])
    cfg = make_draft_config(tiny.model.config, num_hidden_layers=2, block_size=4, mask_token_id=mask)
    torch.manual_seed(0)
    model: DFlashDraftModel = (
        DSparkDraftModel(dspark_config(cfg, 8)) if kind == "dspark" else DFlashDraftModel(cfg)
    )
    model.save(out, dtype=torch.bfloat16)  # what `trainer export` writes
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_vllm_loads_every_tensor_of_each_kind(
    kind: str, tiny: Target, tiny_dir: Path, tmp_path: Path
) -> None:
    draft = saved(kind, tiny, tmp_path / kind)
    assert kind_of(draft) == kind
    got = vllm_load(tiny_dir, draft, KINDS[kind].method, drafted_tokens(draft))
    with safe_open(str(draft / "model.safetensors"), "pt") as f:
        assert got["consumed"] == sorted(f.keys())
    assert got["unloaded"] == []  # nothing of the drafter left as uninitialised memory
    assert {n.rsplit(".", 1)[0].split(".")[-1] for n in got["shared_from_target"]} >= {
        "embed_tokens",
        "lm_head",
    }
    assert got["method"] == KINDS[kind].method
    assert got["num_speculative_tokens"] == 3
    if kind == "dspark":
        assert got["architecture"] == "Qwen3DSparkModel"
        assert "does not support: dspark" in got["serve_refusal"]  # vLLM CPU 0.32's own words
    else:
        assert got["serve_refusal"] is None
