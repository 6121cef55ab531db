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
import contextlib
import functools
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from accelerate import Accelerator
from accelerate.utils import set_seed
from transformers import Qwen3Config, Qwen3ForCausalLM

# Run from a checkout: the project's packages come from the checkout itself, not an install.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trainer.dflash.layout as layout_mod
import trainer.dflash.objective as objective
import trainer.feeding as feeding
import trainer.train as train_mod
from standin.model import Target
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.data.build import Sequence
from trainer.data.units import Unit
from trainer.dflash import helpers as H
from trainer.drafting import Drafting, make_drafting
from trainer.features import features
from trainer.feeding import StepFeed
from trainer.packed import plan_steps

# The Qwen3-8B target at real scale, and a tiny one for a CPU smoke run (Qwen3Config fields).
# fmt: off
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-8b": dict(vocab_size=151_936, hidden_size=4096, intermediate_size=12_288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40_960),
    "tiny": dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=8,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096),
}
COMMON: dict[str, Any] = dict(rope_theta=1_000_000.0, tie_word_embeddings=False)
# fmt: on
START = time.monotonic()  # what --timeout counts from: the imports are done (≈ 5-10 s on a GPU machine)
ROOT = Path(__file__).resolve().parents[1]
PHASES = ("features", "anchors", "mask", "forward", "backward", "optimizer")


def random_target(shape: str, device: torch.device, dtype: torch.dtype) -> Target:
    """Random weights built directly on the device in the training dtype (no float32 copy anywhere)."""
    config = Qwen3Config(**SHAPES[shape], **COMMON)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device, torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = Qwen3ForCausalLM(config).eval().requires_grad_(False)
    finally:
        torch.set_default_dtype(previous)
    no_tokenizer: Any = None  # the config names the mask token; nothing here encodes text
    return Target(shape, model, no_tokenizer, (), config.max_position_embeddings)


def sessions(n: int, vocab: int, count: int = 2) -> list[Sequence]:
    """`count` sessions of two n-token calls; the second re-uses the first's first half (prefix sharing),
    the last quarter of each is the supervised completion. Ids below vocab - 1, the mask token."""
    g = torch.Generator().manual_seed(n)
    out = []
    for s in range(count):
        first = torch.randint(0, vocab - 1, (n,), generator=g).tolist()
        second = first[: n // 2] + torch.randint(0, vocab - 1, (n - n // 2,), generator=g).tolist()
        second[n // 2] = (first[n // 2] + 1) % (vocab - 1)  # the shared prefix ends exactly at n // 2
        q = n - n // 4
        for ids in (first, second):
            out.append(Sequence(ids, [0] * q + [1] * (n - q), [q], [n], f"session-{s}", f"repo:{s}"))
    return out


class Clock:
    """Seconds per phase; the device is synchronized at each boundary so GPU work lands where it ran."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.t = device, defaultdict[str, float](float)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        sync = torch.cuda.synchronize if self.device.type == "cuda" else lambda: None
        sync()
        t0 = time.perf_counter()
        yield
        sync()
        self.t[name] += time.perf_counter() - t0

    def wrap(self, module: Any, attr: str, name: str) -> None:
        """Time every call of `module.attr` (looked up at call time by the trainer) as phase `name`."""
        fn = getattr(module, attr)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return fn(*args, **kwargs)

        setattr(module, attr, timed)


class Run:
    """What the benchmark shares: the trainer's objects (made once, as `train` makes them), the loop's
    constants, the clock, the rows measured, the deadline."""

    def __init__(self, acc: Accelerator, cfg: TrainConfig, target: Target, d: Drafting, args: Any) -> None:
        self.acc, self.cfg, self.target, self.d, self.steps = acc, cfg, target, d, args.steps
        b = cfg.block_size  # the loop's constants, made as trainer.train.loop makes them
        self.weights = H.loss_weights(b, cfg.gamma or H.default_gamma(b), device=acc.device)
        self.flex = objective.use_flex_attention(acc.device)
        self.attention = "flex (compiled, block mask)" if self.flex else "sdpa (dense mask)"
        self.clock, self.rows, self.micro = Clock(acc.device), list[dict[str, Any]](), 0
        self.deadline = START + args.timeout
        for name, module, attr in (  # the trainer's functions, timed wherever the trainer calls them
            ("features", feeding, "step_for"),
            ("anchors", train_mod, "sample_anchors"),
            ("mask", objective, "_create"),  # the flex block mask (CUDA)
            ("mask", layout_mod, "document_mask"),  # the dense mask (SDPA elsewhere)
        ):
            self.clock.wrap(module, attr, name)

    def late(self) -> bool:
        return time.monotonic() > self.deadline


def train_step(run: Run, cfg: TrainConfig, steps: list[list[Unit]]) -> tuple[float, int]:
    """One micro step of `trainer.train.loop`: its own `train_step`, its parts timed (features, anchors
    and mask inside the loss). A fresh feed each time: every step computes its features, as the first
    epoch of a run does. Returns the loss and the step's tokens."""
    acc, d, micro = run.acc, run.d, run.micro
    pick = micro % len(steps)
    feed = StepFeed(cfg, run.target, d.layer_ids, acc.device)
    out, n_tok, _, _ = train_mod.train_step(
        acc, cfg, run.target, d, steps[pick], pick, micro, run.weights, run.flex, feed, run.clock.phase
    )
    run.micro += 1
    return float(out.loss.detach()), n_tok


def measure(run: Run, cfg: TrainConfig, n: int, steps: list[list[Unit]], **extra: Any) -> None:
    """`--steps` steps over the planned `steps`; one row from the fastest (the first compiles)."""
    cuda = run.acc.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    timed = []
    for _ in range(run.steps):
        if run.late():
            break
        run.clock.t.clear()
        loss, tokens = train_step(run, cfg, steps)
        t = run.clock.t
        t["forward"] = t.pop("loss") - t["features"] - t["anchors"] - t["mask"]
        timed.append(({p: t[p] for p in PHASES}, loss, tokens))
    if not timed:
        return
    best, loss, tokens = min(timed[1:] or timed, key=lambda x: sum(x[0].values()))
    total = sum(best.values())
    row = {
        "length": n,
        "source": cfg.feature_source,
        "step_tokens": tokens,
        "steps": len(timed),
        **{f"{p}_s": round(best[p], 4) for p in PHASES},
        "step_s": round(total, 4),
        "first_step_s": round(sum(timed[0][0].values()), 3),
        "tok_s": round(tokens / total, 1),
        "train_tok_s": round(tokens / (total - best["features"]), 1),
        "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "attention": run.attention,
        "loss_first": round(timed[0][1], 5),
        "loss": round(loss, 5),
        **extra,
    }
    run.rows.append(row)
    print(json.dumps(row), flush=True)


def with_(cfg: TrainConfig, **changes: Any) -> TrainConfig:
    return TrainConfig.validated({**cfg.as_dict(), **changes})


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
    print(f"summary ({'complete' if complete else 'stopped at --timeout'}), seconds per step:", flush=True)
    for r in run.rows:
        phases = ", ".join(f"{p} {r[f'{p}_s']:.3f}" for p in PHASES)
        print(f"  {r['length']:>6} {r['source']:<5} {r['step_tokens']:>6} tokens: {phases}; {r['tok_s']:.0f} tok/s "
              f"({r['train_tok_s']:.0f} without features); peak {r['peak_gpu_gib']} GiB; loss {r['loss']}")  # fmt: skip
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
    acc = Accelerator(
        mixed_precision=mp,
        gradient_accumulation_steps=recipe.grad_accum,
        step_scheduler_with_optimizer=False,
        cpu=not torch.cuda.is_available(),
    )
    target = random_target(a.shape, acc.device, torch.bfloat16 if mp == "bf16" else torch.float32)
    total = len(a.lengths) * 2 * a.steps  # two feature sources; the schedule spans the whole benchmark
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
    a = ap.parse_args()
    a.lengths = [int(x) for x in a.lengths.split(",")]
    run = setup(a)
    watchdog(run, grace=10.0)
    gpu = torch.cuda.get_device_name() if run.acc.device.type == "cuda" else "no GPU"
    print(f"{a.shape} target, {gpu}, {run.acc.mixed_precision}, torch {torch.__version__}: ready at "
          f"{time.monotonic() - START:.1f}s", flush=True)  # fmt: skip
    for n in a.lengths:
        if run.late():
            break
        one_length(run, run.cfg, n)
    summary(run, complete=len(run.rows) == 2 * len(a.lengths))
    sys.exit(0 if run.rows else 2)


if __name__ == "__main__":
    main()
