"""How the default target reads agent prompts with plain RoPE against YaRN (factor 4 from the 8,192 positions
SmolLM2 was trained on), served by vLLM: the measurement behind the default (docs/target.md).

    .venv/bin/python benchmarks/target_context.py --data DATA_DIR/calls [--n 6] [--n-short 24] [--decode 64]

Two servers (`python -m serving serve`, eager), one per RoPE, each a copy of the target's folder (weights
linked) whose config.json declares it. Four sets of prompts, each read both ways (`WAYS`):

- `plain` / `yarn`: the `--n` longest harvested prompts, whole (their scored tail is past 8,192);
- `inside` / `inside-yarn`: the same prompts' last 8,000 tokens only (every position inside the range);
- `short` / `short-yarn`: the bundled agent sample's longest prompts (`--short-data`);
- `chat` / `chat-yarn`: the bundled chat sample's questions (`--chat-data`).

Per prompt and way: the mean negative log-likelihood of the prompt's last `--tail` tokens (the same tokens
both ways: `prompt_logprobs`), and `--decode` greedy tokens after the prompt with their degeneracy
(distinct-4-gram ratio, longest repeated run: trainer/replay/evidence.py); per set, YaRN − plain with a
95 % bootstrap interval over prompts. Writes OUT/context.json (ways measured by an earlier call are kept).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from records.io import read_table
from serving.serve import model_path
from trainer.replay.evidence import distinct_ngram_ratio, longest_repeat_run
from trainer.replay.servers import BenchSettings, Server, served

TRAINED = 8192
FACTOR = 4
YARN: dict[str, Any] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED}


def rope_folder(base: Path, out: Path, yarn: bool) -> Path:
    """A copy of the target's folder (weights linked) whose config asks for YaRN, or for plain RoPE."""
    out.mkdir(parents=True, exist_ok=True)
    for f in base.iterdir():
        if f.name != "config.json" and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve()) if f.is_file() else shutil.copytree(f, out / f.name)
    cfg = json.loads((base / "config.json").read_text())
    for key in ("rope_scaling", "rope_parameters"):
        cfg.pop(key, None)
    # vLLM and transformers read a YaRN config's max_position_embeddings as the scaled length; plain RoPE
    # is served the same context (the base folder's, whatever the cached folder declares now)
    cfg.update(max_position_embeddings=TRAINED * FACTOR, rope_theta=base_theta(base))
    if yarn:
        rope = {**YARN, "rope_theta": base_theta(base)}
        cfg.update(rope_scaling=rope, rope_parameters=rope)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out


def base_theta(base: Path) -> float:
    cfg = json.loads((base / "config.json").read_text())
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta")
    return float(theta or 10_000.0)


def prompts(data: Path, n: int, longer_than: int) -> list[list[int]]:
    """The `n` longest distinct recorded prompts longer than `longer_than` tokens."""
    rows = read_table(data, columns=["prompt_token_ids"]).column("prompt_token_ids").to_pylist()
    long = {tuple(r) for r in rows if r and len(r) > longer_than}
    return [list(p) for p in sorted(long, key=len, reverse=True)[:n]]


# way -> (rope, which prompts, how much of each prompt is read): `long` are the harvested prompts past the
# trained range, `short` the bundled agent sample's (all inside it, as an agent's first turns on a short
# task or a chat are); `inside` keeps only a long prompt's last tokens, so every position is in range.
WAYS = {
    "plain": ("plain", "long", "whole"),
    "yarn": ("yarn", "long", "whole"),
    "inside": ("plain", "long", "inside"),
    "inside-yarn": ("yarn", "long", "inside"),
    "short": ("plain", "short", "whole"),
    "short-yarn": ("yarn", "short", "whole"),
    "chat": ("plain", "chat", "whole"),
    "chat-yarn": ("yarn", "chat", "whole"),
}
SHORT_SKIP = 16  # a short prompt's first tokens (the template's opening) are scored by neither way


def read(url: str, model: str, prompt: list[int], tail: int, decode: int) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": decode,
        "temperature": 0,
        "prompt_logprobs": 0,
        "return_token_ids": True,
    }
    reply = httpx.post(f"{url}/v1/completions", json=body, timeout=3600)
    reply.raise_for_status()
    choice = reply.json()["choices"][0]
    tail = min(tail, len(prompt) - SHORT_SKIP)
    rows = choice["prompt_logprobs"][-tail:]
    nll = [-float(row[str(tok)]["logprob"]) for tok, row in zip(prompt[-tail:], rows, strict=True)]
    ids = list(choice["token_ids"])
    return {
        "prompt_tokens": len(prompt),
        "tail_nll": sum(nll) / len(nll),
        "decoded": len(ids),
        "distinct_4gram_ratio": distinct_ngram_ratio(ids),
        "longest_repeat_run": longest_repeat_run(ids),
        "output_ids": ids,
    }


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    """b − a in tail NLL over the same prompts: the mean and a 95 % bootstrap interval over prompts."""
    d = np.array([y["tail_nll"] - x["tail_nll"] for x, y in zip(a, b, strict=True)])
    means = d[np.random.default_rng(0).integers(0, len(d), (10_000, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return f"{d.mean():+.3f} nats/token [{lo:+.3f}, {hi:+.3f}] over {len(d)} prompts"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="Recorded calls (a calls folder or Parquet).")
    ap.add_argument("--short-data", type=Path, default=Path("trainer/data/sample/smollm2/calls.parquet"))
    ap.add_argument("--chat-data", type=Path, default=Path("trainer/data/sample/smollm2-chat/calls.parquet"))
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--n-short", type=int, default=24)
    ap.add_argument("--tail", type=int, default=2000, help="Prompt tokens scored (the last ones).")
    ap.add_argument("--decode", type=int, default=96)
    ap.add_argument("--out", type=Path, default=Path("runs/context"))
    ap.add_argument(
        "--ways", nargs="+", default=list(WAYS), choices=list(WAYS), help="Which readings to serve."
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sets = {
        "long": prompts(args.data, args.n, TRAINED + args.tail),
        "short": prompts(args.short_data, args.n_short, 2 * SHORT_SKIP),
        "chat": prompts(args.chat_data, args.n_short, 2 * SHORT_SKIP),
    }
    if not sets["long"]:
        raise SystemExit(f"{args.data}: no recorded prompt longer than {TRAINED + args.tail} tokens")
    base = Path(model_path("smollm2"))
    folders = {
        rope: str(rope_folder(base, args.out / f"smollm2-{rope}", yarn=rope == "yarn"))
        for rope in ("plain", "yarn")
    }
    s = BenchSettings(compile=False, kv_cache_gib=2.0)
    results: dict[str, list[dict[str, Any]]] = {}
    for rope, folder in folders.items():
        mine = [w for w in args.ways if WAYS[w][0] == rope]
        if not mine:
            continue
        with served("vllm", folder, {rope: Server("plain")}, s, args.out, who="context") as urls:
            model = httpx.get(f"{urls[rope]}/v1/models", timeout=30).json()["data"][0]["id"]
            for way in mine:
                results[way] = []
                for p in sets[WAYS[way][1]]:
                    text = p[-(TRAINED - 192) :] if WAYS[way][2] == "inside" else p
                    results[way].append(read(urls[rope], model, text, args.tail, args.decode))
                    r = results[way][-1]
                    print(
                        f"{way}: {len(text)} tokens, tail NLL {r['tail_nll']:.3f}, distinct-4 "
                        f"{r['distinct_4gram_ratio']}, repeat {r['longest_repeat_run']}",
                        flush=True,
                    )
    saved = args.out / "context.json"  # ways measured by an earlier call are kept
    results = {**(json.loads(saved.read_text()) if saved.exists() else {}), **results}
    saved.write_text(json.dumps(results, indent=2) + "\n")
    for way, rows in results.items():
        nll = [r["tail_nll"] for r in rows]
        mean = sum(nll) / len(nll)
        sd = math.sqrt(sum((x - mean) ** 2 for x in nll) / max(1, len(nll) - 1))
        ratio = [r["distinct_4gram_ratio"] or 0 for r in rows]
        print(
            f"{way}: {len(rows)} prompts, tail NLL {mean:.3f} (sd {sd:.3f}), mean distinct-4 "
            f"{sum(ratio) / len(ratio):.3f}, max repeat run {max(r['longest_repeat_run'] for r in rows)}"
        )
    for a, b in (
        ("plain", "yarn"),
        ("inside", "inside-yarn"),
        ("short", "short-yarn"),
        ("chat", "chat-yarn"),
    ):
        if a in results and b in results and len(results[a]) == len(results[b]):
            print(f"{b} − {a}: {paired(results[a], results[b])}")


if __name__ == "__main__":
    main()
