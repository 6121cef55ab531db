"""The trainer's GPU path at real scale, with no download: a Qwen3-8B-shaped target with random bf16 weights.

For synthetic sequences of 4k, 16k and 32k tokens (the last quarter supervised) it measures:

- features tokens/s: the frozen target's forward with the five taps (bf16, no grad); and what
  `python -m trainer features` adds to it: storing them as a shard (`trainer.sources.cache`, MiB and
  seconds) and reading them back as a training step does (seconds);
- training tokens/s: one DFlash training step of a 5-layer drafter (512 anchors, block 16, bf16 autocast,
  AdamW) on those features, as context tokens per second of step; and end to end (features + step);
- peak GPU memory of the step (``torch.cuda.max_memory_allocated``);
- the attention backend the drafter used (compiled flex attention with a block mask on CUDA, SDPA with a
  dense mask elsewhere) and the number of torch.compile graphs built over all lengths (one per new
  shape would mean recompiling for every sequence length).

Needs only torch, transformers, accelerate and safetensors — no model files, no `pip install` of this
project (tests/trainer/test_gpu_benchmark_needs.py runs it where nothing else is installed).
Designed to finish in about 8 minutes on one H200. On a CPU, ``--shape tiny --lengths 256,512`` only
proves the script runs.

    python benchmarks/gpu_trainer.py                                  # GPU, Qwen3-8B shape
    python benchmarks/gpu_trainer.py --shape tiny --lengths 256,512   # CPU smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from transformers import Qwen3Config, Qwen3ForCausalLM

# Run from a checkout (`python benchmarks/gpu_trainer.py`) on a machine where only torch, transformers,
# accelerate and safetensors are installed: the project's packages come from the checkout itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from standin.model import Target
from trainer.dflash import helpers as H
from trainer.dflash import layout as L
from trainer.dflash.config import make_draft_config
from trainer.dflash.model import DFlashDraftModel
from trainer.dflash.objective import dflash_loss, use_flex_attention
from trainer.sources import cache

SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-8b": dict(
        vocab_size=151_936,
        hidden_size=4096,
        intermediate_size=12_288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40_960,
        rope_theta=1_000_000.0,
        tie_word_embeddings=False,
    ),
    "tiny": dict(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        rope_theta=1_000_000.0,
        tie_word_embeddings=False,
    ),
}


def random_target(shape: str, device: torch.device) -> Target:
    """Random weights built directly on the device in bf16 (no float32 copy anywhere)."""
    config = Qwen3Config(**SHAPES[shape])
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device, torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = Qwen3ForCausalLM(config).eval().requires_grad_(False)
    finally:
        torch.set_default_dtype(previous)
    return Target(
        name=shape,
        model=model,
        tokenizer=None,  # type: ignore[arg-type]
        stop_token_ids=(),
        max_position_embeddings=config.max_position_embeddings,
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def one_length(
    target: Target, drafter: DFlashDraftModel, opt: torch.optim.Optimizer, n: int, device: torch.device
) -> dict[str, Any]:
    vocab = target.vocab_size
    ids = torch.randint(0, vocab - 1, (n,), generator=torch.Generator().manual_seed(n)).to(device)
    mask = torch.zeros(n, dtype=torch.long, device=device)
    mask[-n // 4 :] = 1
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    t0 = time.perf_counter()
    taps = target.tap(ids[None], drafter.target_layer_ids)
    sync(device)
    t_feat = time.perf_counter() - t0
    stored = store_and_read(taps[0], ids.tolist(), mask.tolist(), drafter.target_layer_ids)
    flex = use_flex_attention(device)
    weights = H.loss_weights(drafter.block_size, H.default_gamma(drafter.block_size), device=device)
    times = []
    for rep in range(3):  # the first includes compiling the flex kernel for this shape
        anchors = H.sample_anchors(mask.cpu(), 512, torch.Generator().manual_seed(rep)).to(device)
        sync(device)
        t0 = time.perf_counter()
        autocast = (
            torch.autocast("cuda", torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
        )
        with autocast:
            out = dflash_loss(
                drafter,
                taps=taps,
                input_ids=ids,
                loss_mask=mask,
                anchors=anchors,
                embed_weight=target.embed_tokens.weight,
                lm_head_weight=target.lm_head.weight,
                block_size=drafter.block_size,
                mask_token_id=drafter.mask_token_id,
                weights=weights,
                flex=flex,
                layout=L.Layout.single(n, device),
            )
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - t0)
    step = min(times[1:])
    return {
        "tokens": n,
        "features_tok_s": round(n / t_feat, 1),
        **stored,
        "train_step_s": round(step, 3),
        "first_step_s": round(times[0], 3),
        "train_tok_s": round(n / step, 1),
        "end_to_end_tok_s": round(n / (t_feat + step), 1),
        "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if device.type == "cuda"
        else None,
        "attention": "flex (compiled, block mask)" if flex else "sdpa (dense mask)",
        "loss": round(float(out.loss.detach()), 4),
    }


def store_and_read(
    taps: torch.Tensor, ids: list[int], mask: list[int], layer_ids: list[int]
) -> dict[str, Any]:
    """The sequence's taps written as `trainer features` writes a shard, then read back by its ids."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        name = cache.shard_name(0, 1)
        cache.write_shard(root / name, [cache.Stored(ids, mask, 0, None, taps)], layer_ids, "bench", 0)
        cache.write_manifest(root, [name], layer_ids)
        t_store = time.perf_counter() - t0
        t0 = time.perf_counter()
        back = cache.CacheSource(root).taps_many([ids], layer_ids)[0]
        t_read = time.perf_counter() - t0
        assert back.shape == taps.shape
        return {
            "stored_mib": round((root / name).stat().st_size / 2**20, 1),
            "store_s": round(t_store, 3),
            "read_s": round(t_read, 3),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    ap.add_argument("--lengths", default="4096,16384,32768")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    device = torch.device(a.device)
    t0 = time.perf_counter()
    target = random_target(a.shape, device)
    cfg = make_draft_config(
        target.model.config, num_hidden_layers=5, block_size=16, mask_token_id=target.vocab_size - 1
    )
    drafter = DFlashDraftModel(cfg).to(device)
    opt = torch.optim.AdamW(drafter.parameters(), lr=6e-4)
    print(
        f"{a.shape} target on {device} built in {time.perf_counter() - t0:.1f}s; drafter taps {drafter.target_layer_ids}",
        flush=True,
    )
    if device.type == "cuda":
        print(f"gpu: {torch.cuda.get_device_name()}", flush=True)
    for n in (int(x) for x in a.lengths.split(",")):
        print(json.dumps(one_length(target, drafter, opt, n, device)), flush=True)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    print(f"torch.compile graphs built: {graphs}; total {time.perf_counter() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
