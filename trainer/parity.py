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

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import torch
import typer
import yaml

from lm import Target, load_target
from lm.prefix import prefilled
from trainer.data.build import read
from trainer.errors import TrainerError
from trainer.evaluate import Prompt, evaluate, prompts_from_sequences
from trainer.parity_features import feature_checks
from trainer.parity_probe import prefix_cache
from trainer.parity_settings import ParitySettings
from trainer.precision import NearTieRule
from trainer.replay.counters import SpecCounters, parse


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
    magnitude at each (what sets the engine dtype's rounding step). From the last layer's tap through the
    final norm and the head: the prefill is the gate's one prefill of these ids (its prefix cache)."""
    last = target.num_layers - 1
    taps = prefilled(target, ids, [last], prefix_cache(target)).taps
    assert taps is not None
    logits = target.lm_head(target.final_norm(taps[0, :-1])).float()
    magnitude = logits.amax(-1).abs()
    return torch.log_softmax(logits, dim=-1), torch.tensor(ids[1:], device=logits.device), magnitude


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
        prefix=prefix_cache(target),  # the prompts (c) and (d) prefilled already
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


@contextlib.contextmanager
def stage(report: dict[str, Any], key: str, what: str) -> Iterator[None]:
    """Time one step of the gate into report["seconds"][key], and say so on stderr: on 2 cores the gate
    runs for many minutes, and a user should see where they go."""
    started = time.perf_counter()
    yield
    seconds = report.setdefault("seconds", {})[key] = round(time.perf_counter() - started, 1)
    typer.echo(f"parity: {what} in {seconds:.0f} s", err=True)


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
    s: ParitySettings,
    target: Target | None = None,
    prompts: list[Prompt] | None = None,
    features: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every check; `target`, `prompts` and (c)/(d)'s `features` when the caller has them already."""
    if not s.endpoint:
        raise ParityError("no --endpoint serving the run's target")
    run = s.run.resolve()
    prompts = prompts or run_prompts(s)
    target = target or run_target(run)
    report: dict[str, Any] = {"run": str(run), "endpoint": s.endpoint, "prompts": len(prompts)}
    if features is None:  # first: they declare every layer the checks tap, (a)'s included
        with stage(report, "features", "(c)/(d) the export's features checked"):
            features = feature_checks(run, target, prompts, s.max_tokens, s.mal_gap)
    with stage(report, "target", "(a) the target compared"):
        report["target"] = target_parity(target, s.endpoint, prompts, s)
    report["features"] = features
    if s.draft_endpoint:
        sensitive = features.get("sensitivity", {}).get("sensitive", True)
        with stage(report, "drafter", "(b) the drafter's acceptance compared"):
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
