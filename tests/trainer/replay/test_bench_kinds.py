"""`make bench` with drafters of every kind: each served with its kind's vLLM method and its own block;
a kind vLLM CPU cannot serve (dflash2, dspark) goes to our engine, and the table marks that row and says
why."""

from __future__ import annotations

from pathlib import Path

from tests.trainer.dflash.tiny import MASK, tiny_target
from trainer.dflash.config import make_draft_config
from trainer.dflash.dflash2 import DFlash2DraftModel, dflash2_config
from trainer.dflash.dspark import DSparkDraftModel, dspark_config
from trainer.dflash.model import DFlashDraftModel
from trainer.replay.bench import notes, servers
from trainer.replay.servers import BenchSettings, command
from trainer.replay.summary import markdown


def drafters(tmp: Path) -> dict[str, Path]:
    target = tiny_target(layers=4)
    cfg = make_draft_config(target.model.config, num_hidden_layers=1, block_size=8, mask_token_id=MASK)
    DFlashDraftModel(cfg).save(tmp / "dflash")
    cfg = make_draft_config(target.model.config, num_hidden_layers=1, block_size=8, mask_token_id=MASK)
    DSparkDraftModel(dspark_config(cfg, 4)).save(tmp / "dspark")
    cfg = make_draft_config(target.model.config, num_hidden_layers=1, block_size=8, mask_token_id=MASK)
    kw = {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 4, "selector_top_k": 2}
    DFlash2DraftModel(dflash2_config(cfg, **kw)).save(tmp / "dflash2")
    return {"dflash": tmp / "dflash", "dspark": tmp / "dspark", "dflash2": tmp / "dflash2"}


def test_each_kind_is_served_by_its_method_and_dspark_by_our_engine_on_vllm_cpu(tmp_path: Path) -> None:
    d = drafters(tmp_path)
    s = BenchSettings(run=tmp_path, draft=[f"{k}={v}" for k, v in d.items()])
    chosen = servers(s, "vllm")
    assert chosen["dflash"].method == "dflash"
    assert chosen["dflash"].engine is None  # vLLM serves it
    assert chosen["dspark"].method == "dspark"
    assert chosen["dspark"].engine == "standin"
    argv = command("vllm", "smollm2", chosen["dflash"], 1, s)
    assert '"num_speculative_tokens": 7' in argv[-1]  # the drafter's own block: 8 - 1
    plain = command("vllm", "smollm2", chosen["plain"], 1, s)
    assert "--extra-arg=--logprobs-mode=raw_logits" in plain  # its logits' magnitude sets the near-tie rule
    assert plain[plain.index("--dtype") + 1] == "float32"  # a CPU judges in float32 unless asked otherwise
    on_gpu = command("vllm", "smollm2", chosen["plain"], 1, s.model_copy(update={"gpu": True}))
    assert on_gpu[on_gpu.index("--dtype") + 1] == "auto"  # a GPU serves as users serve: bf16
    assert "serve-target" in command("vllm", "smollm2", chosen["dspark"], 1, s)  # the stand-in's server
    assert chosen["dflash2"].method == "dflash"  # vLLM picks the candidate walk by the architecture
    assert chosen["dflash2"].engine == "standin"
    why = notes(chosen, "vllm")
    assert sorted(why) == ["dflash2", "dspark"]
    assert "vLLM CPU 0.32 cannot serve dspark" in why["dspark"]
    assert "no DFlash candidate-head drafts" in why["dflash2"]
    # with vLLM on a GPU, vLLM serves both (7 tokens: DSpark's block of 7 query slots)
    gpu = servers(s.model_copy(update={"gpu": True}), "vllm")
    assert gpu["dspark"].engine is None
    assert gpu["dflash2"].engine is None
    assert '"num_speculative_tokens": 7' in command("vllm", "smollm2", gpu["dspark"], 1, s)[-1]

    endpoint = {
        "engine": "x",
        "spec": {"mal": 2.0},
        "tokens_per_s": 1.0,
        "mean_ttft_s": 0.1,
        "speedup": 1.0,
        "outputs_differ": 0,
        "outputs_compared": 1,
        "failed": 0,
        "groups": {},
    }
    report = {
        "selection": {"sampled": 1, "held_out_by": "x", "by_token_ids": 1, "by_chat_fallback": 0},
        "baseline": "plain",
        "endpoints": {"plain": {"engine": "vLLM 0.32.0"}, "dspark": {"engine": "stand-in"}},
        "levels": [{"concurrency": 1, "endpoints": {"plain": endpoint, "dspark": endpoint}}],
        "problems": [],
        "errors": [],
        "notes": why,
    }
    text = markdown(report)
    assert "| 1 | dspark | stand-in † |" in text
    assert f"† dspark: {why['dspark']}" in text
