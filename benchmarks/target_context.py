"""How the default target reads agent prompts past the 8,192 positions it was trained on: plain RoPE against
YaRN (factor 4 from 8,192), on harvested prompts, served by vLLM.

    .venv/bin/python benchmarks/target_context.py --data DATA_DIR/calls [--n 6] [--tail 2000] [--decode 96]

Three ways to read the same prompt, each served by `python -m serving serve` (eager, one at a time):

- `plain`: the whole prompt, plain RoPE (positions past 8,192 are rotated at angles the model never saw in
  training; how `make target` served it until this measurement);
- `yarn`: the whole prompt, the same weights with YaRN (yarn, factor 4, original 8,192), which vLLM and the
  project's loader both read from the folder's config.json (how the default target is served now);
- `inside`: the prompt's last 8,000 tokens only, plain RoPE: every position inside the trained range (the
  reference: the same tokens predicted, with less context).

Per prompt and way: the mean negative log-likelihood of the prompt's last `--tail` tokens (the same
tokens in all three: `prompt_logprobs`), and `--decode` greedy tokens after the prompt with their
degeneracy (distinct-4-gram ratio, longest repeated run: trainer/replay/evidence.py). Writes OUT/context.json.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path
from typing import Any

import httpx

from records.io import read_table
from serving.serve import model_path
from trainer.replay.evidence import distinct_ngram_ratio, longest_repeat_run
from trainer.replay.servers import BenchSettings, Server, served

TRAINED = 8192
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED}


def rope_folder(base: Path, out: Path, yarn: bool) -> Path:
    """A copy of the target's folder (weights linked) whose config asks for YaRN, or for plain RoPE."""
    out.mkdir(parents=True, exist_ok=True)
    for f in base.iterdir():
        if f.name != "config.json" and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve()) if f.is_file() else shutil.copytree(f, out / f.name)
    cfg = json.loads((base / "config.json").read_text())
    rope = {
        **YARN,
        "rope_theta": cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta"),
    }
    # vLLM and transformers read a YaRN config's max_position_embeddings as the scaled length
    cfg.update(max_position_embeddings=int(TRAINED * YARN["factor"]), rope_scaling=rope, rope_parameters=rope)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out


def prompts(data: Path, n: int, tail: int) -> list[list[int]]:
    """The `n` longest distinct recorded prompts that reach past the trained range by more than `tail`."""
    rows = read_table(data, columns=["prompt_token_ids"]).column("prompt_token_ids").to_pylist()
    long = {tuple(r) for r in rows if r and len(r) > TRAINED + tail}
    return [list(p) for p in sorted(long, key=len, reverse=True)[:n]]


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="Recorded calls (a calls folder or Parquet).")
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--tail", type=int, default=2000, help="Prompt tokens scored (the last ones).")
    ap.add_argument("--decode", type=int, default=96)
    ap.add_argument("--out", type=Path, default=Path("runs/context"))
    ap.add_argument("--ways", nargs="+", default=["plain", "yarn", "inside"], help="Which readings to serve.")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = prompts(args.data, args.n, args.tail)
    if not chosen:
        raise SystemExit(f"{args.data}: no recorded prompt longer than {TRAINED + args.tail} tokens")
    base = Path(model_path("smollm2"))
    plain = str(rope_folder(base, args.out / "smollm2-plain", yarn=False))
    ways = {
        "plain": plain,
        "yarn": str(rope_folder(base, args.out / "smollm2-yarn", yarn=True)),
        "inside": plain,
    }
    s = BenchSettings(compile=False, kv_cache_gib=2.0)
    results: dict[str, list[dict[str, Any]]] = {}
    for way, folder in ((w, ways[w]) for w in args.ways):
        with served("vllm", folder, {way: Server("plain")}, s, args.out, who="context") as urls:
            model = httpx.get(f"{urls[way]}/v1/models", timeout=30).json()["data"][0]["id"]
            results[way] = []
            for p in chosen:
                text = p[-(TRAINED - 192) :] if way == "inside" else p
                results[way].append(read(urls[way], model, text, args.tail, args.decode))
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


if __name__ == "__main__":
    main()
