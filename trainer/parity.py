"""`python -m trainer parity RUN --endpoint URL`: does the trainer compute what the serving engine computes?

A drafter trained on features that do not match the served model (a tap off by one, another RoPE style, a
mask using ≤ for <) raises no error anywhere: it just accepts nothing once served. This gate compares, on
the run's held-out prompts:

(a) the target: the engine's `prompt_logprobs` against the trainer's log-softmax of the same ids (mean and
    max |Δ log p| per token), and the greedy next token at every position (near-ties of the trainer's own
    top-2 excluded: rounding may flip those);
(b) the drafter: our engine's acceptance length (trainer/evaluate.py, greedy) against the engine's MAL
    (`vllm:spec_decode_*` counters) for `RUN/export` on the same prompts, the same number of draft tokens
    and the same completion length. A gap above `mal_gap` means the two disagree about taps, RoPE, masks or
    weights. A drafter that accepts almost nothing on both sides (MAL under `min_mal`) proves nothing —
    a broken export accepts nothing too — so that check is *inconclusive*, not passed;
(c) the export as a server reads it against the drafter as trained, and (d) whether the drafter depends on
    its taps at all — if moving them a layer does not move its acceptance past `mal_gap`, (b) could not
    see a tap fault and is inconclusive too (trainer/parity_features.py).

The prompts are the held-out ones cut to `max_prompt_len`, plus `long_prompts` at their whole length (the
context the bench serves). It prints every figure beside its threshold, writes RUN/parity.json; the command
(trainer/parity_cli.py) exits 1 when a check fails or is inconclusive.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field

from standin import Target, load_target
from trainer.data.build import read
from trainer.errors import TrainerError
from trainer.evaluate import Prompt, evaluate, prompts_from_sequences
from trainer.parity_features import feature_checks
from trainer.precision import NearTieRule
from trainer.replay.counters import SpecCounters, parse


class ParitySettings(BaseModel):
    """The parity gate between the trainer and a serving engine."""

    model_config = ConfigDict(extra="forbid")

    run: Path = Field(
        Path("runs/latest"), description="The training run (its target, held-out prompts, export)."
    )
    endpoint: str | None = Field(None, description="The engine serving the run's target plainly (check a).")
    draft_endpoint: str | None = Field(
        None, description="The engine serving RUN/export as its drafter (check b); unset: (a) only."
    )
    launch: bool = Field(
        False, description="Start vLLM here for both checks (plain, and with RUN/export); make train does."
    )
    override: bool = Field(
        False, description="Keep a failing export, marked as such in RUN/export/parity.json (exit 0)."
    )
    prompts: int = Field(4, ge=1, description="Held-out prompts compared, cut to --max-prompt-len.")
    max_prompt_len: int = Field(
        1024, ge=8, description="Each of those prompts' last tokens at most (CPU cost)."
    )
    long_prompts: int = Field(
        1,
        ge=0,
        description="More held-out prompts at their whole length (up to --max-model-len − --max-tokens): "
        "the context the bench serves.",
    )
    max_model_len: int = Field(32768, ge=256, description="--launch: the context each server serves.")
    max_tokens: int = Field(32, ge=1, description="Greedy tokens decoded per prompt for (b).")
    draft_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens drafted per step (the draft endpoint's num_speculative_tokens); default the export's "
        "own (its block − 1; DSpark: its block).",
    )
    min_mal: float = Field(
        1.1,
        ge=1,
        description="(b) below this MAL on both sides the drafter accepts too little to tell a right export "
        "from a broken one: inconclusive.",
    )
    allow_inconclusive: bool = Field(
        False, description="Let an inconclusive drafter check pass the gate (said in the report)."
    )
    prove_export: bool = Field(
        False,
        description="--launch: when the drafter check is inconclusive, overfit a throwaway copy of the drafter "
        "on the gate's prompts, export and serve it, and gate that: the export path proven, said as such.",
    )
    probe_steps: int = Field(60, ge=1, description="Passes over the gate's prompts the throwaway trains.")
    dtype: str | None = Field(
        None,
        description="The dtype the engine computes in (float32, bfloat16): (a)'s near-tie rule; --launch "
        "sets it to what it serves.",
    )
    logprob_tol: float = Field(0.05, ge=0, description="(a) mean |Δ log p| per prompt token, nats.")
    greedy_min: float = Field(0.98, ge=0, le=1, description="(a) next-token agreement, near-ties excluded.")
    near_tie: float = Field(
        0.1, ge=0, description="A top-2 gap (nats) under which a flipped argmax is rounding."
    )
    mal_gap: float = Field(0.05, ge=0, description="(b) |our acceptance length − engine MAL| / engine MAL.")
    out: Path | None = Field(None, description="Where parity.json goes; default RUN.")


def _completions(url: str, body: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    reply = httpx.post(f"{url.rstrip('/')}/v1/completions", json=body, timeout=timeout)
    if reply.status_code >= 400:
        raise ParityError(f"{url} answered {reply.status_code}: {reply.text[:300]}")
    return dict(reply.json())


def _model(url: str) -> str:
    return str(httpx.get(f"{url.rstrip('/')}/v1/models", timeout=30).json()["data"][0]["id"])


def engine_logprobs(url: str, model: str, ids: list[int]) -> tuple[list[float], list[int | None]]:
    """(log p of each prompt token given the ones before, the engine's top-1 at each position) for ids[1:]."""
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}
    rows = _completions(url, body)["choices"][0]["prompt_logprobs"][1:]
    logps, top1 = [], []
    for tok, row in zip(ids[1:], rows, strict=True):
        entries = {int(k): v for k, v in row.items()}
        logps.append(float(entries[tok]["logprob"]))
        top1.append(next((k for k, v in entries.items() if v.get("rank") == 1), None))
    return logps, top1


@torch.no_grad()
def trainer_logprobs(target: Target, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The trainer's log-softmax at positions 0..T-2 ([T-1, V]), the ids they predict, and the top logit's
    magnitude at each (what sets the engine dtype's rounding step)."""
    x = torch.tensor([ids], device=target.device)
    logits = target.forward(x).logits[0, :-1].float()
    magnitude = logits.amax(-1).abs()
    return torch.log_softmax(logits, dim=-1), x[0, 1:], magnitude


def target_parity(target: Target, url: str, prompts: list[Prompt], s: ParitySettings) -> dict[str, Any]:
    model = _model(url)
    rule = NearTieRule(s.dtype or "float32", floor=s.near_tie)
    diffs: list[float] = []
    agree = compared = ties = 0
    for p in prompts:
        served, served_top1 = engine_logprobs(url, model, p.ids)
        logp, nxt, magnitude = trainer_logprobs(target, p.ids)
        ours = logp.gather(1, nxt[:, None])[:, 0].tolist()
        diffs += [abs(a - b) for a, b in zip(ours, served, strict=True)]
        top2 = logp.topk(2, dim=-1)
        for i, engine_top in enumerate(served_top1):
            if engine_top is None:
                continue
            if rule.is_near_tie(float(top2.values[i, 0] - top2.values[i, 1]), float(magnitude[i])):
                ties += 1
                continue
            compared += 1
            agree += int(top2.indices[i, 0]) == engine_top
    mean = sum(diffs) / len(diffs) if diffs else None
    rate = agree / compared if compared else None
    ok = mean is not None and mean <= s.logprob_tol and rate is not None and rate >= s.greedy_min
    return {
        "ok": ok,
        "tokens": len(diffs),
        "mean_abs_logprob_diff": mean,
        "max_abs_logprob_diff": max(diffs, default=None),
        "greedy_agreement": rate,
        "near_ties_skipped": ties,
        "near_tie_rule": rule.describe(),
        "thresholds": {"mean_abs_logprob_diff": s.logprob_tol, "greedy_agreement": s.greedy_min},
    }


def _scrape(url: str, model: str) -> SpecCounters:
    counters = parse(httpx.get(f"{url.rstrip('/')}/metrics", timeout=30).text, model)
    if counters is None:
        raise ParityError(f"{url} has no vllm:spec_decode_* counters: is it serving RUN/export as a drafter?")
    return counters


def engine_mal(url: str, prompts: list[Prompt], max_tokens: int) -> dict[str, Any]:
    """The engine's MAL over greedy decodes of `prompts`, from its counters' difference."""
    model = _model(url)
    before = _scrape(url, model)
    started = time.perf_counter()
    for p in prompts:
        body = {"model": model, "prompt": p.ids, "max_tokens": max_tokens, "temperature": 0}
        _completions(url, body)
    delta = _scrape(url, model) - before
    return {**delta.as_dict(), "seconds": round(time.perf_counter() - started, 2)}


def drafter_parity(
    run: Path, target: Target, url: str, prompts: list[Prompt], s: ParitySettings, sensitive: bool = True
) -> dict[str, Any]:
    """Ours from the drafter as trained (RUN/drafter), the engine's from the export it serves: a fault the
    export introduced (a tap, the RoPE, a weight) shows as a gap. Inconclusive when both accept too little,
    or when the drafter is not `sensitive` to its features (trainer/parity_features.py): a fault would not
    show."""
    block = s.draft_tokens + 1 if s.draft_tokens else None  # None: the drafter's own, as the export's
    ours = evaluate(
        run,
        target=target,
        prompts=prompts,
        max_new_tokens=s.max_tokens,
        block_size=block,
        out_dir=run / "parity",
        progress=False,
    )
    served = engine_mal(url, prompts, s.max_tokens)
    mal, own = served["mal"], ours["acceptance_length"]
    gap = abs(own - mal) / mal if mal else None
    weak = (mal or 1.0) < s.min_mal and own < s.min_mal
    agree = gap is not None and gap <= s.mal_gap
    # a gap is evidence whatever the sensitivity; agreement proves nothing from a drafter blind to context
    status = "inconclusive" if weak or (agree and not sensitive) else ("passed" if agree else "failed")
    inconclusive = status == "inconclusive"
    return {
        "ok": status == "passed",
        "status": status,
        "our_acceptance_length": own,
        "our_tau": ours["tau"],
        "engine_mal": mal,
        "engine": served,
        "relative_gap": gap,
        "threshold": s.mal_gap,
        "min_mal": s.min_mal,
        "why_inconclusive": ("accepts too little" if weak else "does not read its context")
        if inconclusive
        else None,
        "block_size": ours["block_size"],
        "lossless": ours["lossless"],
        "prompt_tokens": [len(p.ids) for p in prompts],
    }


def gate_prompts(seqs: list[Any], s: ParitySettings) -> list[Prompt]:
    """`prompts` held-out prompts cut to `max_prompt_len`, then the `long_prompts` longest whole ones that
    fit the served context (one at the bench's length proves RoPE and masks where the bench judges)."""
    cut = prompts_from_sequences(seqs, s.prompts, s.max_prompt_len)
    if not s.long_prompts:
        return cut
    whole = prompts_from_sequences(seqs, 1 << 20, s.max_model_len - s.max_tokens)
    longest = sorted((p for p in whole if not p.truncated), key=lambda p: -len(p.ids))
    seen = {tuple(p.ids) for p in cut}
    return cut + [p for p in longest if tuple(p.ids) not in seen][: s.long_prompts]


def run_prompts(s: ParitySettings) -> list[Prompt]:
    """The gate's prompts from the run's held-out split."""
    held = s.run / "data" / "eval.parquet"
    prompts = gate_prompts(read(held) if held.exists() else [], s)
    if not prompts:
        raise ParityError(f"no held-out prompts in {held}")
    return prompts


def run_target(run: Path) -> Target:
    cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").exists() else {}
    return load_target(str(cfg.get("target", "smollm2")))


def parity(
    s: ParitySettings, target: Target | None = None, prompts: list[Prompt] | None = None
) -> dict[str, Any]:
    """Both checks; `target` and `prompts` when the caller has them already (the run's otherwise)."""
    if not s.endpoint:
        raise ParityError("no --endpoint serving the run's target")
    run = s.run.resolve()
    prompts = prompts or run_prompts(s)
    target = target or run_target(run)
    report: dict[str, Any] = {
        "run": str(run),
        "endpoint": s.endpoint,
        "prompts": len(prompts),
        "target": target_parity(target, s.endpoint, prompts, s),
    }
    features = report["features"] = feature_checks(run, target, prompts, s.max_tokens, s.mal_gap)
    if s.draft_endpoint:
        sensitive = features.get("sensitivity", {}).get("sensitive", True)
        report["drafter"] = drafter_parity(run, target, s.draft_endpoint, prompts, s, sensitive)
    drafter = report.get("drafter") or {}
    report["inconclusive"] = drafter.get("status") == "inconclusive"
    allowed = s.allow_inconclusive and report["inconclusive"]
    checked = report["target"]["ok"] and features["ok"]  # a failed (a) or (c) is not saved by anything
    report["ok"] = checked and (not drafter or drafter["ok"] or allowed)
    out = s.out or run
    out.mkdir(parents=True, exist_ok=True)
    (out / "parity.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


class ParityError(TrainerError, RuntimeError):
    """The gate could not be run (an endpoint refused, no prompts, no counters)."""
