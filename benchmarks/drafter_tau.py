"""Does agent traffic make a better drafter for agent traffic? tau on held-out agent calls of one target.

Two drafters, identical in everything but their training data:

- ``agent``: trained on the target's own outputs in agent sessions (the call records; by default the
  bundled sample, ``make harvest`` data with ``--agent data``);
- ``chat``: trained on the same number of supervised tokens of general single-turn chat that the same
  target answered itself (``trainer/data/sample/<target>-chat``, made by
  ``python -m trainer.data.make_sample --kind chat``).

Same config, same optimizer steps and anchors; both evaluated by real greedy speculative decoding on the
same held-out agent prompts (repositories neither drafter saw). Also reports training throughput (trained
sequence tokens per second, the frozen target's forward included). Writes ``OUT/results.json`` and prints
the table recorded in docs/BENCHMARKS.md.

    python benchmarks/drafter_tau.py --target smollm2 --steps 120
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


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
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", default=str(REPO / "runs" / "bench-drafter-tau"))
    ap.add_argument("--online", action="store_true", help="no feature cache: the target runs on every step")
    a = ap.parse_args()

    from trainer.data import build as B
    from trainer.data.make_sample import SAMPLE_DIR
    from trainer.evaluate import evaluate, prompts_from_sequences
    from trainer.target import load_target
    from trainer.train import TrainConfig, train

    out = Path(a.out)
    agent_src = Path(a.agent or SAMPLE_DIR / a.target)
    chat_src = Path(a.chat or SAMPLE_DIR / f"{a.target}-chat")
    target = load_target(a.target)
    base = TrainConfig.load(a.config, [f"target={a.target}"])
    agent = B.build(target, agent_src, max_len=base.max_len, eval_fraction=base.eval_fraction)
    chat = B.build(target, chat_src, max_len=base.max_len, eval_fraction=0.0)
    budget = min(sum(s.supervised for s in agent.train), sum(s.supervised for s in chat.train))
    arms = {"agent": _take(agent.train, budget), "chat": _take(chat.train, budget)}
    prompts = prompts_from_sequences(agent.eval, a.prompts, base.eval_max_prompt_len)

    results: dict[str, dict] = {}  # type: ignore[type-arg]
    for arm, (seqs, supervised) in arms.items():
        cfg = dataclasses.replace(
            base,
            name=arm,
            runs_dir=str(out),
            max_steps=a.steps,
            cache_features=not a.online,
            eval_prompts=a.prompts,
            eval_max_new_tokens=a.max_new_tokens,
        )
        run = out / arm
        res = B.BuildResult(
            seqs, agent.eval, {**agent.report, "benchmark_arm": arm, "supervised": supervised}
        )
        res.report["split"] = {"train": {"sequences": len(seqs)}, "eval": {"sequences": len(agent.eval)}}
        B.write(res, run / "data")
        t0 = time.monotonic()
        train(cfg, argv=sys.argv, resume=False, target=target)
        summary = json.loads((run / "train_summary.json").read_text())
        ev = evaluate(run, target=target, prompts=prompts, max_new_tokens=a.max_new_tokens, progress=False)
        results[arm] = {
            "train_sequences": len(seqs),
            "supervised_tokens": supervised,
            "sequence_tokens": sum(len(s.input_ids) for s in seqs),
            "steps": summary["steps"],
            "train_seconds": summary["train_seconds"],
            "trained_tokens_per_s": summary["target_tokens_per_s"],
            "tau": ev["tau"],
            "acceptance_length": ev["acceptance_length"],
            "per_position_acceptance": ev["per_position_acceptance"],
            "lossless": ev["lossless"],
            "tau_by_language": ev["tau_by_language"],
            "wall_seconds": round(time.monotonic() - t0, 1),
        }
        print(
            f"{arm}: tau {ev['tau']:.3f}, lossless {ev['lossless']}, {summary['target_tokens_per_s']:.0f} tok/s"
        )

    meta = {
        "target": a.target,
        "config": a.config,
        "steps": a.steps,
        "feature_cache": not a.online,
        "held_out_prompts": len(prompts),
        "max_new_tokens": a.max_new_tokens,
        "machine": f"{platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cores",
        "torch_threads": __import__("torch").get_num_threads(),
    }
    (out / "results.json").write_text(json.dumps({"meta": meta, "arms": results}, indent=2) + "\n")
    print()
    print(
        "| training data | supervised tokens | steps | tau (held-out agent) | acc@1 | lossless | trained tok/s |"
    )
    print("|---|---|---|---|---|---|---|")
    for arm, r in results.items():
        print(
            f"| {arm} | {r['supervised_tokens']:,} | {r['steps']} | {r['tau']:.3f} | "
            f"{r['per_position_acceptance'][0]:.2f} | {r['lossless']} | {r['trained_tokens_per_s']:.0f} |"
        )


if __name__ == "__main__":
    main()
