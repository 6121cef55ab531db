"""How fast the CPU targets are here: load time, prefill tokens/s and greedy decode tokens/s.

    .venv/bin/python benchmarks/target_speed.py                      # both models, prefill 512 and 2048
    .venv/bin/python benchmarks/target_speed.py --models tiny-qwen3 --prefill 512 --decode 32

Prefill is one cached forward over random in-vocabulary tokens with `logits_to_keep=1` (as the server
runs it, in chunks of 512); decode is the engine's greedy loop after a 512-token prompt, EOS ignored.
Each figure is the best of --repeat runs; "CPU share" is the CPU time the process got over wall time ×
threads (1.0 on an idle machine), to tell a slow machine from a busy one. Results: docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from lm import Engine, SamplingParams, Target, load_target
from lm.loading import cache_root, smollm2_cache_dir


def random_prompt(target: Target, n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    special = set(target.tokenizer.all_special_ids)
    ids = torch.randint(1000, target.vocab_size - 1000, (n * 2,), generator=g).tolist()
    return [i for i in ids if i not in special][:n]


def prefill_tps(target: Target, n: int, repeat: int) -> float:
    ids = torch.tensor([random_prompt(target, n)])
    best = float("inf")
    for _ in range(repeat):
        cache = target.new_cache()
        start = time.perf_counter()
        for s in range(0, n, 512):
            target.forward(ids[:, s : s + 512], cache, logits_to_keep=1)
        best = min(best, time.perf_counter() - start)
    return n / best


def decode_tps(target: Target, n: int, repeat: int) -> float:
    engine = Engine(target)
    prompt = random_prompt(target, 512, seed=1)
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    best = float("inf")
    for _ in range(repeat):
        steps = engine.steps(prompt, params)
        next(steps)  # prefill + first token
        start = time.perf_counter()
        produced = sum(len(step.token_ids) for step in steps)
        best = min(best, (time.perf_counter() - start) / produced)
    return 1.0 / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tiny-qwen3", "smollm2"])
    ap.add_argument("--prefill", nargs="+", type=int, default=[512, 2048])
    ap.add_argument("--decode", type=int, default=64, help="tokens to decode after a 512-token prompt")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads, float32; load average at start {os.getloadavg()[0]:.1f}"
    )
    header = [
        "model",
        "load s",
        *[f"prefill {n} tok/s" for n in args.prefill],
        f"decode tok/s (@512, {args.decode})",
        "CPU share",
    ]
    rows = []
    for spec in args.models:
        note = ""
        if spec == "smollm2":
            note = (
                " (cached)"
                if (smollm2_cache_dir(cache_root()) / "config.json").exists()
                else " (converting GGUF)"
            )
        start = time.perf_counter()
        target = load_target(spec)
        load = time.perf_counter() - start
        prefill_tps(target, 64, 1)  # warm-up
        row = [spec, f"{load:.1f}{note}"]
        wall, cpu = time.perf_counter(), time.process_time()
        row += [f"{prefill_tps(target, n, args.repeat):.0f}" for n in args.prefill]
        row.append(f"{decode_tps(target, args.decode, args.repeat):.1f}")
        # CPU time this process got over wall time × threads: 1.0 on an idle machine, less when shared
        share = (time.process_time() - cpu) / (time.perf_counter() - wall) / torch.get_num_threads()
        row.append(f"{share:.2f}")
        rows.append(row)
        print(" | ".join(row), flush=True)
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n# load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
