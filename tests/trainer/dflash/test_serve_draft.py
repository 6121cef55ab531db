"""`serve-target --draft DIR`: the stand-in server decodes speculatively and counts like vLLM on /metrics."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import torch

from lm import Target
from lm.standin.server import TargetServer
from tests.lm.conftest import live
from trainer.dflash.config import make_draft_config, resolve_mask_token
from trainer.dflash.engine import check_compatible, engine_factory
from trainer.dflash.model import DFlashDraftModel


@pytest.fixture(scope="module")
def draft_dir(tiny: Target, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    mask, _ = resolve_mask_token(tiny.tokenizer, tiny.embed_tokens.weight.shape[0])
    cfg = make_draft_config(tiny.model.config, num_hidden_layers=1, block_size=4, mask_token_id=mask)
    torch.manual_seed(0)
    return DFlashDraftModel(cfg).save(tmp_path_factory.mktemp("draft"))


def _ask(url: str) -> dict:  # type: ignore[type-arg]
    body = {
        "model": "tiny-qwen3",
        "messages": [{"role": "user", "content": "Write a function that adds two numbers."}],
        "max_tokens": 24,
        "temperature": 0,
        "return_token_ids": True,
    }
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def test_served_speculative_decoding_is_lossless_and_counted(tiny: Target, draft_dir: Path) -> None:
    with live(TargetServer(tiny, max_model_len=512)) as plain:
        expected = _ask(plain.url)
    with live(TargetServer(tiny, engine=engine_factory(draft_dir)(tiny), max_model_len=512)) as spec:
        got = _ask(spec.url)
        metrics = httpx.get(f"{spec.url}/metrics").text
        version = httpx.get(f"{spec.url}/version").json()
    assert got["choices"][0]["token_ids"] == expected["choices"][0]["token_ids"]
    assert got["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]
    assert version["strategy"] == "dflash"
    drafts = float(re.search(r"^vllm:spec_decode_num_drafts_total\{[^}]*\} (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    draft_tokens = float(
        re.search(r"^vllm:spec_decode_num_draft_tokens_total\{[^}]*\} (\S+)$", metrics, re.M).group(1)  # type: ignore[union-attr]
    )
    assert drafts > 0
    assert draft_tokens == 3 * drafts
    assert re.search(r'^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="2"', metrics, re.M)


def test_a_drafter_for_another_target_is_refused(tiny: Target, draft_dir: Path) -> None:
    from tests.trainer.dflash.tiny import tiny_target

    with pytest.raises(ValueError, match="does not fit"):
        check_compatible(DFlashDraftModel.load(draft_dir), tiny_target())
    check_compatible(DFlashDraftModel.load(draft_dir), tiny)
