"""Whose divergences are they? The same prompts decoded greedily by vLLM plainly and with `ngram`, in one
dtype and then another, and at every divergence the logits both passes computed there.

    .venv/bin/python benchmarks/vllm_numerics.py --data DIR_OR_PARQUET [--n 8] [--decode 64] \
        [--dtype bfloat16 --dtype float32] [--out runs/numerics]

A model-free method cannot change a correct engine's argmax: ngram only proposes tokens, the target
verifies them. So a greedy output of `ngram` that parts from `plain`'s is the engine computing the same
position's logits differently in its verify pass (k+1 tokens at once) than in its decode step (one
token). Both servers run with `--logprobs-mode raw_logits`, and every request asks for the top-5 logits
of each generated token: at the first divergence the script prints both passes' top-2 logits, their gaps
and the logit's magnitude, in the dtype's steps (trainer/precision.py). Run in bfloat16 and float32: if
the divergences vanish in float32, they are bf16 rounding, not a bug of the method. Writes OUT/numerics.json
(every prompt, dtype, divergence and logit) — the minimal reproduction docs/serving.md cites.

Servers are started by `python -m serving serve` (eager), one pair at a time, on free loopback ports.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx

from trainer.precision import step
from trainer.replay.calls import load_calls
from trainer.replay.divergence import first_difference
from trainer.replay.servers import RAW_LOGITS, BenchSettings, Server, served


def decode(url: str, model: str, prompt: list[int], n: int) -> tuple[list[int], list[dict[str, float]]]:
    """(greedy ids, each position's top-5 raw logits by token id) from /v1/completions."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": n,
        "temperature": 0,
        "logprobs": 5,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,  # keys "token_id:N": two tokens with one spelling stay apart
    }
    reply = httpx.post(f"{url}/v1/completions", json=body, timeout=1800)
    reply.raise_for_status()
    choice = reply.json()["choices"][0]
    tops = choice["logprobs"]["top_logprobs"]
    return list(choice["token_ids"]), [dict(t) for t in tops]


def at(tops: dict[str, float], dtype: str) -> dict[str, Any] | None:
    ranked = sorted(tops.items(), key=lambda kv: -kv[1])
    if len(ranked) < 2:
        return None
    (t1, v1), (t2, v2) = ranked[0], ranked[1]
    return {
        "top1": [t1, round(v1, 5)],
        "top2": [t2, round(v2, 5)],
        "gap": round(v1 - v2, 5),
        "gap_in_steps": round((v1 - v2) / step(v1, dtype), 2) if step(v1, dtype) else None,
    }


def one_dtype(dtype: str, prompts: list[list[int]], n: int, target: str, out: Path) -> dict[str, Any]:
    extra = (*RAW_LOGITS, f"--dtype={dtype}")
    servers = {"plain": Server("plain", extra=extra), "ngram": Server("ngram", extra=extra)}
    s = BenchSettings(compile=False, kv_cache_gib=2.0)
    rows = []
    with served("vllm", target, servers, s, out, who=f"numerics {dtype}") as urls:
        model = httpx.get(f"{urls['plain']}/v1/models", timeout=30).json()["data"][0]["id"]
        for i, prompt in enumerate(prompts):
            a, a_top = decode(urls["plain"], model, prompt, n)
            b, b_top = decode(urls["ngram"], model, prompt, n)
            k = first_difference(a, b)
            row: dict[str, Any] = {
                "prompt": i,
                "prompt_tokens": len(prompt),
                "decoded": len(a),
                "diverges_at": k,
            }
            if k is not None and k < min(len(a_top), len(b_top)):
                row["plain_pass"] = at(a_top[k], dtype)  # the logits a decode step computed
                row["ngram_pass"] = at(b_top[k], dtype)  # the same position's, from a verify pass
            rows.append(row)
            print(f"{dtype} prompt {i} ({len(prompt)} tokens): diverges at {k}", json.dumps(row), flush=True)
    return {
        "dtype": dtype,
        "prompts": len(prompts),
        "diverged": sum(r["diverges_at"] is not None for r in rows),
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="An export, a calls folder or a calls Parquet.")
    ap.add_argument(
        "--run", type=Path, default=None, help="A run whose held-out split to use (calls folders)."
    )
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--n", type=int, default=8, help="Prompts (held-out calls).")
    ap.add_argument("--decode", type=int, default=64, help="Greedy tokens per prompt.")
    ap.add_argument("--dtype", action="append", help="Dtypes to serve in turn (default bfloat16, float32).")
    ap.add_argument("--out", type=Path, default=Path("runs/numerics"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    calls, _ = load_calls(args.data, n=args.n, seed=0, cap=args.decode, run_dir=args.run)
    prompts = [c.prompt_ids for c in calls if c.prompt_ids]
    results = [
        one_dtype(d, prompts, args.decode, args.target, args.out)
        for d in args.dtype or ["bfloat16", "float32"]
    ]
    (args.out / "numerics.json").write_text(json.dumps(results, indent=2) + "\n")
    for r in results:
        print(
            f"{r['dtype']}: {r['diverged']} of {r['prompts']} prompts: ngram's greedy output parts from plain's"
        )


if __name__ == "__main__":
    main()
