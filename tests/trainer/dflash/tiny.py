"""A tiny random Qwen3 target (vocabulary 256) and drafters for it: the whole DFlash loop in milliseconds."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from lm.engine import Engine
from lm.loading import qwen_tokenizer_dir
from lm.model import Target
from trainer.dflash import helpers as H
from trainer.dflash.config import make_draft_config
from trainer.dflash.engine import DFlashSpeculative
from trainer.dflash.kinds import kind_of
from trainer.dflash.model import DFlashDraftModel
from trainer.dflash.objective import StepOutput, dflash_loss
from trainer.evaluate import evaluate
from trainer.export import export
from trainer.train import TrainConfig, train

VOCAB = 256
MASK = VOCAB - 1
EOS = 0


def tiny_target(layers: int = 6, hidden: int = 64, seed: int = 0) -> Target:
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=1024,
        rope_theta=10_000.0,
        tie_word_embeddings=False,
        eos_token_id=EOS,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(cfg).float().eval()
        # larger weights than the default init make a random model's greedy text less repetitive
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.mul_(4.0)
    return Target(
        name="tiny",
        model=model,
        tokenizer=None,  # type: ignore[arg-type]
        stop_token_ids=(EOS,),
        max_position_embeddings=1024,
    )


def tiny_drafter(
    target: Target, block_size: int = 8, layers: int = 1, seed: int = 1, taps: int = 2
) -> DFlashDraftModel:
    from trainer.dflash.helpers import default_target_layer_ids

    cfg = make_draft_config(
        target.model.config,
        num_hidden_layers=layers,
        block_size=block_size,
        mask_token_id=MASK,
        target_layer_ids=default_target_layer_ids(target.num_layers, taps),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return DFlashDraftModel(cfg)


def write_calls(target: Target, path, sessions: int = 4, calls: int = 2, new_tokens: int = 24, seed: int = 0):  # type: ignore[no-untyped-def]
    """Call records (stored token ids, the proxy's columns) of agent-like sessions with the tiny target:
    a shared system prompt, then each call resends the history plus a random 'tool result'."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    g = torch.Generator().manual_seed(seed)
    system = torch.randint(1, 200, (12,), generator=g).tolist()
    rows = []
    for s in range(sessions):
        history = system + torch.randint(1, 200, (6,), generator=g).tolist()
        for c in range(calls):
            completion = greedy(target, history, new_tokens)
            rows.append(
                {
                    "call_id": f"s{s}c{c}",
                    "session_id": f"s{s}",
                    "agent": ("claude-code", "codex")[s % 2],
                    "api": "openai_chat",
                    "model": "tiny",
                    "status_code": 200,
                    "outcome": "ok",
                    "tag": None,
                    "request_json": "{}",
                    "response_json": "{}",
                    "prompt_tokens": len(history),
                    "completion_tokens": len(completion),
                    "prompt_token_ids": list(history),
                    "completion_token_ids": completion,
                    "started_at": float(s * 100 + c),
                    "repo": f"org/repo{s}",
                    "language": "ko" if s % 3 == 2 else "en",
                }
            )
            history = history + completion + torch.randint(1, 200, (5,), generator=g).tolist()
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def greedy(target: Target, prompt: list[int], n: int) -> list[int]:
    """The target's greedy continuation of ``prompt`` (plain decoding), EOS ignored: data for overfitting."""
    from lm.engine import Engine, SamplingParams

    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    return [t for step in Engine(target).steps(prompt, params) for t in step.token_ids]


def assert_decodes_losslessly(target: Target, strategy: Callable[[], DFlashSpeculative]) -> None:
    """A fresh ``strategy()`` decodes the target's greedy output token for token, drafting (three tokens a
    block), and samples (rejection sampling against the drafter's probabilities runs)."""
    prompt = list(range(20, 50))
    plain = list(Engine(target).generate(prompt, 24, temperature=0))
    greedy_strategy = strategy()
    assert list(Engine(target, greedy_strategy).generate(prompt, 24, temperature=0)) == plain
    assert greedy_strategy.spec_stats is not None
    assert greedy_strategy.spec_stats.num_draft_tokens >= 3  # it drafted, three tokens a block
    sampled = list(Engine(target, strategy()).generate(prompt, 24, temperature=1.0, seed=3))
    assert len(sampled) >= 1


def save_tiny(out: Path, target: Target | None = None) -> Path:
    """``target`` (default: a 4-layer tiny target) saved as a checkpoint folder a user would point the
    trainer at, with the real Qwen3 tokenizer beside it (the records carry token ids: any tokenizer does)."""
    (target or tiny_target(layers=4)).model.save_pretrained(out)
    for f in qwen_tokenizer_dir().iterdir():
        shutil.copy(f, out / f.name)
    return out


def tiny_config(target: str, calls: Path, runs: Path, **over: Any) -> TrainConfig:
    """The small training run the trainer's tests share (one drafter layer, block 4, 256 tokens); `over`
    sets what a test is about."""
    base: dict[str, Any] = dict(
        target=target,
        data=str(calls),
        runs_dir=str(runs),
        num_layers=1,
        block_size=4,
        mask_token_id=MASK,
        max_len=256,
        eval_fraction=0.3,
        lr=3e-3,
        log_every=1,
    )
    return TrainConfig(**{**base, **over})


def train_kind(tmp: Path, calls: Path, target: Target, drafter: str, **extra: object) -> Path:
    """A drafter of kind ``drafter`` trained, evaluated and exported by the commands `make train` runs
    (block 4: three drafted tokens), checked on the way (the kind it trained, lossless decoding); its export."""
    cfg = tiny_config(
        "tiny",
        calls,
        tmp / "runs",
        name=drafter,
        drafter=drafter,
        epochs=2,
        anchors=32,
        eval_prompts=2,
        eval_max_new_tokens=12,
        **extra,
    )
    run = train(cfg, argv=["-m", "trainer", "train"], target=target)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics[-1]["acc"]) == 3  # three drafted tokens per block
    assert kind_of(run / "drafter") == drafter
    result = evaluate(run, target=target, progress=False)
    assert result["lossless"] is True
    assert result["mismatch_rate"] == 0
    assert len(result["per_position_acceptance"]) == 3
    return export(run, run / "export")


def context(target: Target, layer_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [30], loss mask [30] with the first 5 unsupervised, the target's taps over the ids): one
    sequence to compute a drafter's loss on."""
    ids = torch.arange(10, 40)
    mask = torch.ones(30, dtype=torch.long)
    mask[:5] = 0
    return ids, mask, target.forward(ids[None], target.new_cache(), layer_ids=layer_ids).taps


def tiny_loss(  # type: ignore[no-untyped-def]
    drafter, target: Target, taps, ids, mask, anchors, *, block: int = 4, gamma: float = 2.0, **kw: Any
) -> StepOutput:
    """The DFlash objective on the tiny target, as the trainer calls it (its embedding and head, the mask
    token, the decaying position weights); `kw`: flex, layout, chunk, …"""
    return dflash_loss(
        drafter,
        taps=taps,
        input_ids=ids,
        loss_mask=mask,
        anchors=anchors,
        embed_weight=target.embed_tokens.weight,
        lm_head_weight=target.lm_head.weight,
        block_size=block,
        mask_token_id=MASK,
        weights=H.loss_weights(block, gamma),
        **kw,
    )
