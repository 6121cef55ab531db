"""tiny-qwen3's shared material: agent-like call records whose completions are the target's greedy
continuations, and a drafter overfit on exactly them (high, checkable acceptance on both engines)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from lm import Engine, SamplingParams, Target
from trainer.dflash.config import make_draft_config, resolve_mask_token
from trainer.dflash.model import DFlashDraftModel
from trainer.parity_probe import overfit_on

GROUPS = [("claude-code", "en"), ("codex", "en"), ("claude-code", "ko"), ("codex", "ko")]
NEW_TOKENS = 12
BLOCK = 4


def greedy(target: Target, prompt: list[int], n: int) -> list[int]:
    params = SamplingParams(max_tokens=n, temperature=0.0)
    return [t for s in Engine(target).steps(prompt, params) for t in s.token_ids]


def call_rows(target: Target, prompt_lens: list[int], seed: int = 0) -> list[dict]:  # type: ignore[type-arg]
    """Agent-like call records with stored ids: each completion is the target's greedy continuation."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i, n in enumerate(prompt_lens):
        agent, lang = GROUPS[i % len(GROUPS)]
        prompt = torch.randint(1000, 20000, (n,), generator=g).tolist()
        completion = greedy(target, prompt, NEW_TOKENS)
        rows.append(
            {
                "call_id": f"c{i}",
                "session_id": f"s{i}",
                "agent": agent,
                "lang": lang,
                "repo": f"org/repo{i}",
                "api": "openai_chat",
                "status_code": 200,
                "outcome": "ok",
                "request_json": json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
                "prompt_tokens": n,
                "completion_tokens": len(completion),
                "prompt_token_ids": prompt,
                "completion_token_ids": completion,
            }
        )
    return rows


def overfit(target: Target, rows: list[dict], out: Path, steps: int = 30, lr: float = 3e-2) -> Path:  # type: ignore[type-arg]
    """A drafter trained on exactly these completions until it predicts them (the parity gate's own
    throwaway training, trainer/parity_probe.py): high, checkable acceptance."""
    mask_id, _ = resolve_mask_token(target.tokenizer, target.embed_tokens.weight.shape[0])
    cfg = make_draft_config(target.model.config, num_hidden_layers=1, block_size=BLOCK, mask_token_id=mask_id)
    torch.manual_seed(0)
    pairs = [(r["prompt_token_ids"], r["completion_token_ids"]) for r in rows]
    return overfit_on(DFlashDraftModel(cfg), target, pairs, steps, lr).save(out)
