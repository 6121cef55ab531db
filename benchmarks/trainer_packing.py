"""Trainer on CPU: packing vs one sequence per step, and the peak memory of one step at long contexts.

1. Throughput, in one process: the same data and recipe trained for one epoch twice, once with one
   sequence per step (``packing: false, prefix_sharing: false``, the trainer before packing) and once
   packed up to ``max_len`` target tokens with prefix sharing; supervised tokens trained per second of
   training (data build and model loading excluded) and the ratio.
2. Peak memory (max RSS of a fresh process) of one training step of a 1-layer drafter on tiny-qwen3 at
   4k, 16k and 32k tokens of context (a synthetic sequence whose last 512 tokens are supervised).

    python benchmarks/trainer_packing.py [--target smollm2] [--data trainer/data/sample/smollm2]
    python benchmarks/trainer_packing.py --memory 4096,16384,32768
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from standin import load_target
from trainer.config import TrainConfig
from trainer.data.make_sample import SAMPLE_DIR
from trainer.train import train


def throughput(target_name: str, data: Path, max_len: int, epochs: float) -> None:
    target = load_target(target_name)
    base = TrainConfig.load(Path("trainer/configs/cpu.yaml"), [f"target={target_name}", f"data={data}"])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, packing in (("one sequence per step", False), ("packed + prefix sharing", True)):
            cfg = base.model_copy(
                update={
                    "runs_dir": tmp,
                    "name": name.replace(" ", "-"),
                    "epochs": epochs,
                    "max_len": max_len,
                    "packing": packing,
                    "prefix_sharing": packing,
                    "cache_features": False,
                    "sample_fallback": False,
                }
            )
            run = train(cfg, target=target)
            s = json.loads((run / "train_summary.json").read_text())
            results[name] = s
            print(
                f"{name:<26} {s['steps']:>4} steps {s['train_seconds']:>7.1f} s  "
                f"{s['supervised_tokens'] / s['train_seconds']:>8.1f} supervised tok/s  "
                f"{s['target_tokens']:>7} target tokens computed",
                flush=True,
            )
    a, b = results["one sequence per step"], results["packed + prefix sharing"]
    ratio = (b["supervised_tokens"] / b["train_seconds"]) / (a["supervised_tokens"] / a["train_seconds"])
    print(f"packed / one per step: {ratio:.2f}x supervised tokens per second")


def one_step_memory(length: int) -> None:
    """Child process: one forward + backward of a training step at ``length`` tokens; prints max RSS."""
    from trainer.data.build import Sequence
    from trainer.data.units import session_units
    from trainer.dflash import helpers as H
    from trainer.dflash.config import make_draft_config
    from trainer.dflash.model import DFlashDraftModel
    from trainer.dflash.objective import dflash_loss
    from trainer.packed import make_step, sample_anchors

    target = load_target("tiny-qwen3")
    ids = torch.randint(0, 150_000, (length,), generator=torch.Generator().manual_seed(0)).tolist()
    seq = Sequence(ids, [0] * (length - 512) + [1] * 512, [length - 512], [length], None, "g")
    cfg = make_draft_config(target.model.config, num_hidden_layers=1, block_size=8, mask_token_id=151669)
    drafter = DFlashDraftModel(cfg)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    step = make_step(target, [session_units([seq])[0]], drafter.target_layer_ids, torch.device("cpu"))
    out = dflash_loss(
        drafter,
        taps=step.taps,
        input_ids=step.input_ids,
        loss_mask=step.loss_mask,
        anchors=sample_anchors(step, 64, torch.Generator().manual_seed(0)),
        embed_weight=target.embed_tokens.weight,
        lm_head_weight=target.lm_head.weight,
        block_size=8,
        mask_token_id=151669,
        weights=H.loss_weights(8, 4.0),
        layout=step.layout,
    )
    out.loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "length": length,
                "peak_mib": peak // 1024,
                "loaded_mib": before // 1024,
                "s": round(time.monotonic() - t0, 1),
            }
        )
    )


def memory(lengths: list[int]) -> None:
    for n in lengths:
        proc = subprocess.run(
            [sys.executable, __file__, "--memory-one", str(n)], capture_output=True, text=True, check=False
        )
        line = (proc.stdout.strip().splitlines() or [proc.stderr[-500:]])[-1]
        print(f"{n:>6} tokens: {line}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--max-len", type=int, default=2048, help="packing budget: target tokens per step")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument(
        "--memory", default=None, help="comma-separated context lengths: measure peak memory only"
    )
    ap.add_argument("--memory-one", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.memory_one:
        one_step_memory(a.memory_one)
    elif a.memory:
        memory([int(x) for x in a.memory.split(",")])
    else:
        throughput(a.target, a.data or SAMPLE_DIR / a.target, a.max_len, a.epochs)


if __name__ == "__main__":
    main()
