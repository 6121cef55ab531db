"""Does agent traffic make a better drafter for agent traffic? tau on held-out agent calls of one target.

Two drafters, identical in everything but their training data:

- ``agent``: trained on the target's own outputs in agent sessions (the call records; by default the
  bundled sample, ``make harvest`` data with ``--agent data``);
- ``chat``: trained on the same number of supervised tokens of general single-turn chat that the same
  target answered itself (``trainer/data/sample/<target>-chat``, made by
  ``python -m trainer.data.make_sample --kind chat``).

Same config, same optimizer steps and anchors; both evaluated by real greedy speculative decoding on the
same held-out agent prompts (repositories neither drafter saw). Then training throughput, online (the
frozen target's forward on every step, no feature cache): sequence and supervised tokens per second.
Writes ``OUT/results.json`` and prints the table recorded in docs/BENCHMARKS.md.

    OMP_NUM_THREADS=1 python benchmarks/drafter_tau.py --target smollm2 --steps 200
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402


def _take(seqs, budget: int):  # type: ignore[no-untyped-def]
    """Sequences in order until ``budget`` supervised tokens (the last one's mask trimmed to fit exactly)."""
    out, total = [], 0
    for s in seqs:
        if total >= budget:
            break
        need = budget - total
        if s.supervised > need:
            mask = list(s.loss_mask)
            seen = 0
            for i, m in enumerate(mask):
                if m:
                    seen += 1
                    if seen > need:
                        mask[i] = 0
            s = dataclasses.replace(s, loss_mask=mask)
        out.append(s)
        total += s.supervised
    return out, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--agent", default=None, help="agent call records (default: the bundled sample)")
    ap.add_argument("--chat", default=None, help="chat call records (default: the bundled chat sample)")
    ap.add_argument("--config", default=str(REPO / "trainer/configs/cpu.yaml"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", default=str(REPO / "runs" / "bench-drafter-tau"))
    ap.add_argument("--online", action="store_true", help="no feature cache in the two arms either")
    ap.add_argument("--throughput-steps", type=int, default=30, help="steps of the online throughput run")
    a = ap.parse_args()

    from lm import load_target
    from trainer.data import build as B
    from trainer.data.make_sample import SAMPLE_DIR
    from trainer.evaluate import evaluate, prompts_from_sequences
    from trainer.train import TrainConfig, train

    out = Path(a.out)
    target = load_target(a.target)
    base = TrainConfig.load(a.config, [f"target={a.target}"])
    agent = B.build(
        target, a.agent or SAMPLE_DIR / a.target, max_len=base.max_len, eval_fraction=base.eval_fraction
    )
    chat = B.build(target, a.chat or SAMPLE_DIR / f"{a.target}-chat", max_len=base.max_len, eval_fraction=0.0)
    budget = min(sum(s.supervised for s in agent.train), sum(s.supervised for s in chat.train))
    arms = {"agent": (agent, *_take(agent.train, budget)), "chat": (chat, *_take(chat.train, budget))}
    prompts = prompts_from_sequences(agent.eval, a.prompts, base.eval_max_prompt_len)

    def run_arm(name: str, built, seqs, **over):  # type: ignore[no-untyped-def]
        """Train on ``seqs`` (held-out: the agent eval split) with the shared config; the summary."""
        cfg = base.model_copy(update={"name": name, "runs_dir": str(out), **over})
        report = {**built.report, "benchmark_arm": name}
        report["split"] = {"train": {"sequences": len(seqs)}, "eval": {"sequences": len(agent.eval)}}
        B.write(B.BuildResult(seqs, agent.eval, report), out / name / "data")
        train(cfg, argv=sys.argv, resume=False, target=target)
        return json.loads((out / name / "train_summary.json").read_text())

    results: dict[str, dict] = {}  # type: ignore[type-arg]
    for arm, (built, seqs, supervised) in arms.items():
        t0 = time.monotonic()
        summary = run_arm(arm, built, seqs, max_steps=a.steps, cache_features=not a.online)
        ev = evaluate(
            out / arm, target=target, prompts=prompts, max_new_tokens=a.max_new_tokens, progress=False
        )
        results[arm] = {
            "train_sequences": len(seqs),
            "supervised_tokens": supervised,
            "sequence_tokens": sum(len(s.input_ids) for s in seqs),
            "steps": summary["steps"],
            "train_seconds": summary["train_seconds"],
            "tau": ev["tau"],
            "acceptance_length": ev["acceptance_length"],
            "per_position_acceptance": ev["per_position_acceptance"],
            "lossless": ev["lossless"],
            "tau_by_language": ev["tau_by_language"],
            "wall_seconds": round(time.monotonic() - t0, 1),
        }
        print(f"{arm}: tau {ev['tau']:.3f}, lossless {ev['lossless']}")

    # training throughput, online: the frozen target's forward on every step (no feature cache)
    s_on = run_arm("online", agent, arms["agent"][1], max_steps=a.throughput_steps, cache_features=False)
    throughput = {
        "steps": s_on["steps"],
        "seconds": s_on["train_seconds"],
        "sequence_tokens_per_s": s_on["target_tokens_per_s"],
        "supervised_tokens_per_s": round(s_on["supervised_tokens"] / s_on["train_seconds"], 1),
    }
    print(f"online training throughput (target in the loop): {throughput}")

    meta = {
        "target": a.target,
        "config": a.config,
        "steps": a.steps,
        "feature_cache": not a.online,
        "held_out_prompts": len(prompts),
        "max_new_tokens": a.max_new_tokens,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "torch_threads": torch.get_num_threads(),
    }
    (out / "results.json").write_text(
        json.dumps({"meta": meta, "arms": results, "online_throughput": throughput}, indent=2) + "\n"
    )
    print()
    print("| training data | supervised tokens | steps | tau (held-out agent) | acc@1 | acc@2 | lossless |")
    print("|---|---|---|---|---|---|---|")
    for arm, r in results.items():
        acc = r["per_position_acceptance"]
        print(
            f"| {arm} | {r['supervised_tokens']:,} | {r['steps']} | {r['tau']:.3f} | {acc[0]:.3f} | "
            f"{acc[1]:.3f} | {r['lossless']} |"
        )


if __name__ == "__main__":
    main()
