"""Where a CPU training step's seconds go: the real `trainer.train.train_step` on SmolLM2 and a real
exported agent dataset, with the CPU config (``trainer/configs/cpu.yaml``) and any overrides.

    python benchmarks/cpu_step.py --data DATA_DIR/dataset --out benchmarks/results/cpu_step \\
        [--set anchors=64 --set labels=greedy ...] [--steps 12]

It builds the run's training sequences as `trainer train` does, takes the epoch's first steps, computes
each step's target features once (timed: the first epoch's cost, target positions per second), then
trains ``--steps`` steps from the kept features (every later epoch's cost), timing each phase of the
loop's own step (features, anchors, the drafter's loss, backward, optimizer) and profiling the operators
of the cached steps (torch.profiler: the vocabulary head's matmul, attention, the drafter's projections).
Writes ``profile.json`` (phases, the top operators, the machine) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import trainer.train as train_mod  # noqa: E402
from benchmarks.gpu_trainer_core import Clock  # noqa: E402
from lm import load_target  # noqa: E402
from trainer import feeding  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.data import build as data_build  # noqa: E402
from trainer.dflash import helpers as H  # noqa: E402
from trainer.drafting import make_drafting  # noqa: E402
from trainer.feeding import StepFeed  # noqa: E402
from trainer.packed import plan_steps  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="An exported dataset (DATA_DIR/dataset) or call records.")
    p.add_argument("--config", default=str(ROOT / "trainer/configs/cpu.yaml"))
    p.add_argument("--set", action="append", default=[], dest="overrides", help="key=value, as `train`.")
    p.add_argument("--steps", type=int, default=12, help="Steps trained from kept features.")
    p.add_argument("--features", type=int, default=3, help="Steps whose features are computed (timed).")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cpu_step")
    a = p.parse_args()
    cfg = TrainConfig.load(a.config, [*a.overrides, f"data={a.data}", "cache_features=true"])
    acc = Accelerator(cpu=True)
    target = load_target(cfg.target)
    target.model.requires_grad_(False)
    built = data_build.build(
        target, cfg.data, eval_fraction=cfg.eval_fraction, max_context=target.max_position_embeddings
    )
    steps = plan_steps(cfg, built.train)
    order = sorted(range(len(steps)), key=lambda i: -sum(u.computed for u in steps[i]))[: a.features]
    d = make_drafting(acc, cfg, target, len(steps))
    clock = Clock(acc.device)
    clock.wrap(feeding, "step_for", "features")
    clock.wrap(train_mod, "sample_anchors", "anchors")
    weights = H.loss_weights(cfg.block_size, cfg.gamma or H.default_gamma(cfg.block_size))
    feed = StepFeed(cfg, target, d.layer_ids, acc.device)
    feed.new_epoch([steps[i] for i in order])
    computed = 0
    micro = 0

    def one(pick: int) -> tuple[int, int]:
        """One step of the loop (its own train_step): (supervised tokens, target positions computed)."""
        nonlocal micro
        out = train_mod.train_step(
            acc, cfg, target, d, steps[pick], pick, micro, weights, False, feed, clock.phase
        )
        micro += 1
        return out[2], out[3]

    t0 = time.perf_counter()
    for pick in order:  # the first epoch: features computed, then kept
        computed += one(pick)[1]
    first = {k: round(v, 3) for k, v in clock.t.items()}
    first_s = time.perf_counter() - t0
    clock.t.clear()
    supervised = 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t1 = time.perf_counter()
        for i in range(a.steps):
            supervised += one(order[i % len(order)])[0]
        cached_s = time.perf_counter() - t1
    ops = prof.key_averages()
    top = sorted(ops, key=lambda e: -e.self_cpu_time_total)[:15]
    result = {
        "command": " ".join(sys.argv),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "avx512_bf16": "avx512_bf16" in Path("/proc/cpuinfo").read_text(),
            "torch_threads": torch.get_num_threads(),
        },
        "config": {k: v for k, v in cfg.model_dump().items() if k not in ("launch", "vllm")},
        "first_epoch": {
            "steps": len(order),
            "seconds": round(first_s, 2),
            "target_positions": computed,
            "target_positions_per_s": round(computed / max(first.get("features", 0.0), 1e-9), 1),
            "phases_s": first,
        },
        "cached": {
            "steps": a.steps,
            "seconds_per_step": round(cached_s / a.steps, 3),
            "supervised_per_step": round(supervised / a.steps, 1),
            "phases_s_per_step": {k: round(v / a.steps, 4) for k, v in clock.t.items()},
            "top_ops_self_s_per_step": [
                {
                    "op": e.key,
                    "self_s": round(e.self_cpu_time_total / 1e6 / a.steps, 4),
                    "calls": e.count // a.steps,
                }
                for e in top
            ],
        },
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "profile.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("first_epoch", "cached")}, indent=2))


if __name__ == "__main__":
    main()
