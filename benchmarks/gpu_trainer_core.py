"""What benchmarks/gpu_trainer.py measures with: a random target of a real shape, synthetic sessions whose
calls share prefixes, a clock per phase of the loop's own step, and a row per measurement (an error, with
the memory it reached, is a row too: an out-of-memory or a compiler error ends that row, not the run)."""

from __future__ import annotations

import contextlib
import functools
import json
import time
import traceback
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from transformers import Qwen3Config, Qwen3ForCausalLM

import trainer.dflash.layout as layout_mod
import trainer.dflash.objective as objective
import trainer.feeding as feeding
import trainer.train as train_mod
from lm.model import Target
from trainer.config import TrainConfig
from trainer.data.build import Sequence
from trainer.data.units import Unit
from trainer.dflash import helpers as H
from trainer.drafting import Drafting
from trainer.feeding import StepFeed
from trainer.memplan import PRESETS

# The Qwen3-8B target at real scale (the memory planner's preset), and a tiny one for a CPU smoke run.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-8b": PRESETS["qwen3-8b"],
    "tiny": dict(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
    ),
}
COMMON: dict[str, Any] = dict(rope_theta=1_000_000.0, tie_word_embeddings=False)
START = time.monotonic()  # what --timeout counts from: the imports are done (≈ 5-10 s on a GPU machine)
ROOT = Path(__file__).resolve().parents[1]
PHASES = ("features", "anchors", "mask", "forward", "backward", "optimizer")


def random_target(shape: str, device: torch.device, dtype: torch.dtype) -> Target:
    """Random weights built directly on the device in the training dtype (no float32 copy anywhere)."""
    config = Qwen3Config(**{**COMMON, **SHAPES[shape]})
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


def peak_gib(run: Run) -> float | None:
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if run.acc.device.type == "cuda" else None


@contextlib.contextmanager
def row_of(run: Run, **key: Any) -> Iterator[dict[str, Any]]:
    """A row keyed by `key`, printed and kept when the block ends, however it ends: an error (an
    out-of-memory, a compiler's) is recorded with the memory reached and the run goes on to the next."""
    if run.acc.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    row: dict[str, Any] = dict(key)
    try:
        yield row
    except Exception as exc:  # every failure is a finding: kept, printed, not raised
        row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:400]}"
        row["where"] = traceback.format_exc().strip().splitlines()[-3][:200]
        row["peak_gpu_gib"] = peak_gib(run)
        if run.acc.device.type == "cuda":
            torch.cuda.empty_cache()
    run.rows.append(row)
    print(json.dumps(row), flush=True)


def measure(
    run: Run, cfg: TrainConfig, n: int, steps: list[list[Unit]], kind: str = "train", **extra: Any
) -> None:
    """`--steps` steps over the planned `steps`; one row from the fastest (the first compiles), and a
    plain line per step as it ends."""
    with row_of(run, length=n, source=cfg.feature_source, kind=kind) as row:
        timed = []
        for i in range(run.steps):
            if run.late():
                break
            run.clock.t.clear()
            loss, tokens = train_step(run, cfg, steps)
            t = run.clock.t
            t["forward"] = t.pop("loss") - t["features"] - t["anchors"] - t["mask"]
            timed.append(({p: t[p] for p in PHASES}, loss, tokens))
            print(
                f"  step {i + 1}: {kind} {n} {cfg.feature_source}: {sum(timed[-1][0].values()):.3f}s, "
                f"loss {loss:.4f}, peak {peak_gib(run)} GiB",
                flush=True,
            )
        if not timed:
            row["error"] = "not started: --timeout"
            return
        best, loss, tokens = min(timed[1:] or timed, key=lambda x: sum(x[0].values()))
        total = sum(best.values())
        row.update(
            step_tokens=tokens,
            steps=len(timed),
            **{f"{p}_s": round(best[p], 4) for p in PHASES},
            step_s=round(total, 4),
            first_step_s=round(sum(timed[0][0].values()), 3),
            tok_s=round(tokens / total, 1),
            train_tok_s=round(tokens / max(total - best["features"], 1e-9), 1),
            peak_gpu_gib=peak_gib(run),
            attention=run.attention,
            loss_first=round(timed[0][1], 5),
            loss=round(loss, 5),
            **extra,
        )


def with_(cfg: TrainConfig, **changes: Any) -> TrainConfig:
    return TrainConfig.validated({**cfg.as_dict(), **changes})
