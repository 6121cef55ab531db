"""The trainer's own code path at GPU scale, with no download: a Qwen3-8B-shaped random bf16 target.

train.yaml's recipe; the Accelerator, drafter, AdamW and schedule as `trainer.train.train` makes them;
steps planned by `plan_steps` over synthetic sessions whose calls share prefixes; each step the loop's
`train_step` (loss, backward, clip, optimizer), with features from the target in-process (``hf``) and from
the files `python -m trainer features` writes (``cache``). Per length and source one JSON line: seconds
per phase of the fastest step (the trainer's functions wrapped with timers, CUDA synchronized at each
boundary), tokens/s, peak GPU memory, attention backend, loss; then a summary with the torch.compile
graphs built and the recompiles.

The GPU image has torch, transformers, accelerate, safetensors, pyarrow, typer, rich, httpx... but not
pydantic (the run config) nor tenacity (imported with the feature sources): carry the wheels pinned in
benchmarks/gpu_requirements.txt (the checkout itself is put on sys.path; nothing is installed from it):

    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_17_x86_64 -d .whl -r benchmarks/gpu_requirements.txt
    # on the GPU machine, in the checkout:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    python3 benchmarks/gpu_trainer.py            # Qwen3-8B shape, 4k/16k/32k, bf16: under 6 minutes
    python3 benchmarks/gpu_trainer.py --shape tiny --lengths 16,32 --mixed-precision no   # CPU smoke run

No step starts after `--timeout` (330 s after the imports); a watchdog ends a step still running 10 s
later. Either way what was measured is printed; the exit status is 2 when nothing was.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch._dynamo
from accelerate.utils import set_seed

# Run from a checkout: the project's packages come from the checkout itself, not an install.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_trainer_core import PHASES, ROOT, SHAPES, START, Run, measure, random_target, sessions, with_
from gpu_trainer_rows import extra_rows, versions

from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.drafting import make_drafting
from trainer.features import features
from trainer.packed import plan_steps
from trainer.ranks import accelerator


def one_length(run: Run, cfg: TrainConfig, n: int) -> None:
    """Both feature sources at context length n. The packing budget is the recipe's, raised to hold one
    whole session, so every length exercises prefix sharing (4k: two sessions packed in one step). The
    cache is written by `python -m trainer features`'s function from the sequences as a run's data/."""
    seqs = sessions(n, run.target.vocab_size)
    cfg = with_(cfg, max_len=max(cfg.max_len, n + n // 2))
    steps = plan_steps(cfg, seqs)
    measure(run, cfg, n, steps)
    if run.late():
        return
    with tempfile.TemporaryDirectory() as tmp:
        data, out = Path(tmp) / "data", Path(tmp) / "features"
        data_build.write(data_build.BuildResult(seqs, [], {}), data)
        dtype = "bfloat16" if run.acc.mixed_precision == "bf16" else "float32"
        with run.clock.phase("cache_write"):  # the target's forwards included
            features(cfg, out, dtype=dtype, data_dir=data, target=run.target)
        mib = round(sum(f.stat().st_size for f in out.glob("*.safetensors")) / 2**20, 3)
        cached = with_(cfg, feature_source="cache", feature_dir=str(out))
        measure(run, cached, n, steps, cache_write_s=round(run.clock.t.pop("cache_write"), 3), cache_mib=mib)


def summary(run: Run, complete: bool) -> None:
    """A table of the rows, then one JSON line with what torch.compile did: graphs built, recompiles (a
    frame compiled again: torch keeps a per-frame compile count, not a total) and the guard failures that
    caused them (each with its reason)."""
    print(f"summary ({'complete' if complete else 'incomplete: --timeout or an error'}):", flush=True)
    for r in run.rows:
        head = f"  {r['kind']:<15} {r['length']:>6} {r['source']:<5}"
        if "error" in r:
            print(f"{head} ERROR {r['error'][:160]} (peak {r.get('peak_gpu_gib')} GiB)", flush=True)
        elif f"{PHASES[0]}_s" in r:
            phases = ", ".join(f"{p} {r[f'{p}_s']:.3f}" for p in PHASES)
            print(
                f"{head} {r['step_tokens']:>6} tokens: {phases}; {r['tok_s']:.0f} tok/s "
                f"({r['train_tok_s']:.0f} without features); peak {r['peak_gpu_gib']} GiB",
                flush=True,
            )
        else:
            print(
                f"{head} "
                + ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("kind", "length", "source"))
            )
    per_frame = getattr(torch._dynamo.convert_frame, "FRAME_COMPILE_COUNTER", {})
    failures = [r for rs in getattr(torch._dynamo.utils, "guard_failures", {}).values() for r in rs]
    out = {"rows": len(run.rows), "complete": complete, "attention": run.attention}
    out["graphs"] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    out["recompiles"] = sum(max(0, n - 1) for n in per_frame.values())
    out["guard_failures"] = len(failures)
    out["first_recompile_reason"] = failures[0].splitlines()[0][:200] if failures else None
    print(json.dumps({"summary": {**out, "seconds": round(time.monotonic() - START, 1)}}), flush=True)


def watchdog(run: Run, grace: float) -> None:
    """A step still running `grace` seconds past the deadline: print what was measured and exit."""

    def fire() -> None:
        print(f"watchdog: a step is still running {grace:.0f}s past --timeout; stopping", flush=True)
        summary(run, complete=False)
        os._exit(0 if run.rows else 2)

    timer = threading.Timer(max(0.0, run.deadline - time.monotonic()) + grace, fire)
    timer.daemon = True
    timer.start()


def setup(a: argparse.Namespace) -> Run:
    """The accelerator, target, drafter, AdamW and schedule as `trainer.train.train` makes them, under
    trainer/configs/train.yaml's recipe (trackers and the run directory aside: nothing is logged here)."""
    mp = a.mixed_precision
    if mp == "auto":
        mp = "bf16" if torch.cuda.is_available() else "no"
    recipe = TrainConfig.load(ROOT / "trainer" / "configs" / "train.yaml")
    acc = accelerator(  # the run's own: collective timeout, DDP bucket views, expandable segments
        recipe,
        mixed_precision=mp,
        gradient_accumulation_steps=recipe.grad_accum,
        step_scheduler_with_optimizer=False,
    )
    target = random_target(a.shape, acc.device, torch.bfloat16 if mp == "bf16" else torch.float32)
    total = len(a.lengths) * 2 * a.steps + 64  # the grid and the extra rows: the schedule spans them all
    changes = dict(target=f"random-{a.shape}", mixed_precision=mp, max_steps=total, eval_every=0)
    cfg = with_(recipe, mask_token_id=target.vocab_size - 1, **changes)
    set_seed(cfg.seed)
    d = make_drafting(acc, cfg, target, total)
    d.model.train()
    return Run(acc, cfg, target, d, a)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    ap.add_argument("--lengths", default="4096,16384,32768", help="context lengths, comma-separated")
    ap.add_argument("--mixed-precision", choices=("auto", "bf16", "no"), default="auto")
    ap.add_argument("--steps", type=int, default=2, help="steps per length and source (the first compiles)")
    ap.add_argument("--timeout", type=float, default=330.0, help="seconds after which no step starts")
    ap.add_argument("--no-extra", dest="extra", action="store_false", help="only the lengths x sources grid")
    a = ap.parse_args()
    a.lengths = [int(x) for x in a.lengths.split(",")]
    run = setup(a)
    watchdog(run, grace=10.0)
    print(json.dumps({"versions": versions()}), flush=True)
    print(
        f"{a.shape} target, {run.acc.mixed_precision}: ready at {time.monotonic() - START:.1f}s", flush=True
    )
    for i, n in enumerate(a.lengths):
        if run.late():
            break
        one_length(run, run.cfg, n)
        if i == 0 and a.extra:
            extra_rows(run, run.cfg, n)
    expected = 2 * len(a.lengths) + (5 if a.extra else 0)
    summary(run, complete=len(run.rows) == expected and not any("error" in r for r in run.rows))
    sys.exit(0 if any("error" not in r for r in run.rows) else 2)


if __name__ == "__main__":
    main()
