"""Trainer on CPU: packing vs one sequence per step, and the peak memory of one step at long contexts.

1. Throughput, in one process: the same data and recipe trained for one epoch twice, once with one
   sequence per step (``packing: false, prefix_sharing: false``, the trainer before packing) and once
   packed up to ``max_len`` target tokens with prefix sharing; supervised tokens trained per second of
   training (data build and model loading excluded) and the ratio. ``--offline``: the target runs
   once ahead (``python -m trainer features``) and both arms read its features (``feature_source: cache``),
   so only the drafter's work is timed. ``--phases``: one epoch of each arm timed by phase instead.
2. Peak memory (max RSS of a fresh process) of one training step of a 1-layer drafter on tiny-qwen3 at
   4k, 16k and 32k tokens of context (a synthetic sequence whose last 512 tokens are supervised).

    python benchmarks/trainer_packing.py [--target smollm2] [--data trainer/data/sample/smollm2]
    python benchmarks/trainer_packing.py --offline --repeat 2   # features read from files; A B, B A
    python benchmarks/trainer_packing.py --phases [--offline]   # where each arm's epoch spends its time
    ... --whole-mask    # any of these with the former dense path: each packed step's whole mask
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
from accelerate import Accelerator

from lm import load_target
from lm.model import Target
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.data.build import Sequence
from trainer.data.make_sample import SAMPLE_DIR
from trainer.data.units import session_units
from trainer.dflash import helpers as H
from trainer.dflash import layout as L
from trainer.dflash.attention import DocumentMask, QueryGroup
from trainer.dflash.config import make_draft_config
from trainer.dflash.model import DFlashDraftModel
from trainer.dflash.objective import dflash_loss
from trainer.drafting import frozen_weight, make_drafting, step_loss
from trainer.features import features
from trainer.packed import make_step, plan_steps, sample_anchors, step_for
from trainer.train import train


def arms(base: TrainConfig, runs_dir: str, max_len: int, epochs: float) -> dict[str, TrainConfig]:
    """The two arms: one sequence per step (the trainer before packing) and packed + prefix sharing."""
    out = {}
    for name, packing in (("one sequence per step", False), ("packed + prefix sharing", True)):
        out[name] = base.model_copy(
            update={
                "runs_dir": runs_dir,
                "name": name.replace(" ", "-").replace("+", "and"),
                "epochs": epochs,
                "max_len": max_len,
                "packing": packing,
                "prefix_sharing": packing,
                "cache_features": False,
                "sample_fallback": False,
            }
        )
    return out


def offline_features(base: TrainConfig, target: Target, tmp: str) -> TrainConfig:
    """``python -m trainer features`` once (float32, the CPU training dtype): the arms then read files."""
    t0 = time.monotonic()
    out = Path(tmp) / "features"
    made = features(base.model_copy(update={"runs_dir": tmp}), out, dtype="float32", target=target)
    print(
        f"features: {made['tokens']} positions stored in {time.monotonic() - t0:.1f} s (not in the figures)"
    )
    return base.model_copy(update={"feature_source": "cache", "feature_dir": str(out)})


def whole_step_mask(anchors: torch.Tensor, block_size: int, layout: L.Layout) -> DocumentMask:
    """The dense path before per-segment attention: one group, every query against every key of the step."""
    mask = L.attention_mask(anchors, block_size, layout)
    return DocumentMask([QueryGroup(0, mask.shape[0], 0, layout.length, mask)])


def throughput(base: TrainConfig, target: Target, tmp: str, max_len: int, epochs: float, repeat: int) -> None:
    """Each arm ``repeat`` times, alternating which goes first (A B, B A, ...) so that a change in the
    machine's load falls on both; the ratio is of supervised tokens per second over all rounds."""
    totals = {name: [0, 0.0] for name in arms(base, tmp, max_len, epochs)}
    for r in range(repeat):
        round_arms = list(arms(base, tmp, max_len, epochs).items())
        for name, cfg in round_arms if r % 2 == 0 else round_arms[::-1]:
            run = train(cfg.model_copy(update={"name": f"{cfg.name}-{r}"}), target=target)
            s = json.loads((run / "train_summary.json").read_text())
            totals[name][0] += s["supervised_tokens"]
            totals[name][1] += s["train_seconds"]
            print(
                f"round {r + 1}: {name:<26} {s['steps']:>4} steps {s['train_seconds']:>7.1f} s  "
                f"{s['supervised_tokens'] / s['train_seconds']:>8.1f} supervised tok/s  "
                f"{s['target_tokens']:>7} target tokens computed",
                flush=True,
            )
    (a_tok, a_s), (b_tok, b_s) = totals["one sequence per step"], totals["packed + prefix sharing"]
    print(f"packed / one per step: {(b_tok / b_s) / (a_tok / a_s):.2f}x supervised tokens per second")


def phases(base: TrainConfig, target: Target, max_len: int) -> None:
    """Where one epoch of each arm spends its time: features (the target, or the feature files), the
    drafter's forward (with the LM head's cross-entropy), backward, optimizer; and the attention scores
    the dense path computes (per segment) against those a whole mask over each step would."""
    acc = Accelerator(cpu=True)
    built = data_build.build(
        target, Path(base.data), eval_fraction=base.eval_fraction, max_context=target.max_position_embeddings
    )
    weights = H.loss_weights(base.block_size, base.gamma or H.default_gamma(base.block_size))
    for name, cfg in arms(base, "", max_len, 1.0).items():
        steps = plan_steps(cfg, built.train)
        d = make_drafting(acc, cfg, target, len(steps))
        t = dict.fromkeys(("features", "forward", "backward", "optimizer"), 0.0)
        scored = whole = 0
        for i, units in enumerate(steps):
            t0 = time.perf_counter()
            with torch.no_grad():
                step = step_for(cfg, target, units, d.layer_ids, acc.device)
            anchors = sample_anchors(step, cfg.anchors, torch.Generator().manual_seed(i))
            t1 = time.perf_counter()
            out = step_loss(d, target, step, anchors, block_size=cfg.block_size, weights=weights, flex=False)
            t2 = time.perf_counter()
            out.loss.backward()
            t3 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(d.model.parameters(), cfg.grad_clip)
            d.opt.step()
            d.opt.zero_grad(set_to_none=True)
            t4 = time.perf_counter()
            for key, dt in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                t[key] += dt
            q = anchors.numel() * cfg.block_size
            scored += sum(
                g.mask.numel() for g in L.document_mask(anchors, cfg.block_size, step.layout).groups
            )
            whole += q * (step.computed + q)
        print(
            f"{name:<26} {len(steps):>3} steps  "
            + "  ".join(f"{k} {v:.2f} s" for k, v in t.items())
            + f"  attention scores {scored / 1e6:.1f} M (a whole mask per step: {whole / 1e6:.1f} M)",
            flush=True,
        )


def one_step_memory(length: int) -> None:
    """Child process: one forward + backward of a training step at ``length`` tokens; prints max RSS."""
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
        embed_weight=frozen_weight(target.embed_tokens),
        lm_head_weight=frozen_weight(target.lm_head),
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
    ap.add_argument("--offline", action="store_true", help="both arms read features written ahead")
    ap.add_argument("--phases", action="store_true", help="one epoch per arm, timed by phase")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of both arms, alternating their order")
    ap.add_argument(
        "--whole-mask", action="store_true", help="score each step's whole mask (the former path)"
    )
    ap.add_argument(
        "--memory", default=None, help="comma-separated context lengths: measure peak memory only"
    )
    ap.add_argument("--memory-one", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.memory_one:
        one_step_memory(a.memory_one)
        return
    if a.memory:
        memory([int(x) for x in a.memory.split(",")])
        return
    if a.whole_mask:  # for comparison: the objective then scores every query against every key
        L.document_mask = whole_step_mask
    target = load_target(a.target)
    target.model.requires_grad_(False)  # frozen, as in training: no gradients into its embedding or head
    data = a.data or SAMPLE_DIR / a.target
    base = TrainConfig.load(Path("trainer/configs/cpu.yaml"), [f"target={a.target}", f"data={data}"])
    with tempfile.TemporaryDirectory() as tmp:
        if a.offline:
            base = offline_features(base, target, tmp)
        if a.phases:
            phases(base, target, a.max_len)
        else:
            throughput(base, target, tmp, a.max_len, a.epochs, a.repeat)


if __name__ == "__main__":
    main()
