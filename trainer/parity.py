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
    weights.

It prints every figure beside its threshold, writes RUN/parity.json, and exits 1 when a check fails.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import torch
import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from serving.venv import availability
from standin import Target, load_target
from trainer.errors import TrainerError
from trainer.evaluate import Prompt, evaluate, held_out_prompts
from trainer.replay.bench import BenchSettings, Server, served
from trainer.replay.calls import ReplayError
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
    prompts: int = Field(4, ge=1, description="Held-out prompts compared.")
    max_prompt_len: int = Field(1024, ge=8, description="Each prompt's last tokens at most (CPU cost).")
    max_tokens: int = Field(32, ge=1, description="Greedy tokens decoded per prompt for (b).")
    draft_tokens: int = Field(
        7, ge=1, description="Tokens drafted per step: the draft endpoint's num_speculative_tokens."
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
def trainer_logprobs(target: Target, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The trainer's log-softmax at positions 0..T-2 ([T-1, V]) and the ids they predict."""
    x = torch.tensor([ids], device=target.device)
    logits = target.forward(x).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1), x[0, 1:]


def target_parity(target: Target, url: str, prompts: list[Prompt], s: ParitySettings) -> dict[str, Any]:
    model = _model(url)
    diffs: list[float] = []
    agree = compared = ties = 0
    for p in prompts:
        served, served_top1 = engine_logprobs(url, model, p.ids)
        logp, nxt = trainer_logprobs(target, p.ids)
        ours = logp.gather(1, nxt[:, None])[:, 0].tolist()
        diffs += [abs(a - b) for a, b in zip(ours, served, strict=True)]
        top2 = logp.topk(2, dim=-1)
        for i, engine_top in enumerate(served_top1):
            if engine_top is None:
                continue
            if float(top2.values[i, 0] - top2.values[i, 1]) < s.near_tie:
                ties += 1
                continue
            compared += 1
            agree += int(top2.indices[i, 0]) == engine_top
    mean = sum(diffs) / len(diffs) if diffs else None
    rate = agree / compared if compared else None
    ok = mean is not None and mean <= s.logprob_tol and rate is not None and rate >= s.greedy_min
    return {"ok": ok, "tokens": len(diffs), "mean_abs_logprob_diff": mean, "max_abs_logprob_diff": max(diffs, default=None),
            "greedy_agreement": rate, "near_ties_skipped": ties, "thresholds": {"mean_abs_logprob_diff": s.logprob_tol,
            "greedy_agreement": s.greedy_min}}  # fmt: skip


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
    run: Path, target: Target, url: str, prompts: list[Prompt], s: ParitySettings
) -> dict[str, Any]:
    """Ours from the drafter as trained (RUN/drafter), the engine's from the export it serves: a fault the
    export introduced (a tap, the RoPE, a weight) shows as a gap."""
    ours = evaluate(run, target=target, prompts=prompts, max_new_tokens=s.max_tokens,
                    block_size=s.draft_tokens + 1, out_dir=run / "parity", progress=False)  # fmt: skip
    served = engine_mal(url, prompts, s.max_tokens)
    mal, own = served["mal"], ours["acceptance_length"]
    gap = abs(own - mal) / mal if mal else None
    return {"ok": gap is not None and gap <= s.mal_gap, "our_acceptance_length": own, "our_tau": ours["tau"],
            "engine_mal": mal, "engine": served, "relative_gap": gap, "threshold": s.mal_gap,
            "block_size": ours["block_size"], "lossless": ours["lossless"]}  # fmt: skip


def parity(s: ParitySettings) -> dict[str, Any]:
    if not s.endpoint:
        raise ParityError("no --endpoint serving the run's target")
    run = s.run.resolve()
    cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").exists() else {}
    prompts = held_out_prompts(run / "data" / "eval.parquet", s.prompts, s.max_prompt_len)
    if not prompts:
        raise ParityError(f"no held-out prompts in {run / 'data' / 'eval.parquet'}")
    target = load_target(str(cfg.get("target", "smollm2")))
    report: dict[str, Any] = {"run": str(run), "endpoint": s.endpoint, "prompts": len(prompts),
                              "target": target_parity(target, s.endpoint, prompts, s)}  # fmt: skip
    if s.draft_endpoint:
        report["drafter"] = drafter_parity(run, target, s.draft_endpoint, prompts, s)
    report["ok"] = all(v["ok"] for k, v in report.items() if k in ("target", "drafter"))
    out = s.out or run
    out.mkdir(parents=True, exist_ok=True)
    (out / "parity.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def launched(s: ParitySettings) -> dict[str, Any]:
    """Both checks against vLLM servers started here (eager: they start in about a minute)."""
    cfg = yaml.safe_load((s.run / "config.yaml").read_text()) if (s.run / "config.yaml").exists() else {}
    target = str(cfg.get("target", "smollm2"))
    servers = {"plain": Server("plain"), "export": Server("dflash", s.run / "export")}
    bench = BenchSettings(run=s.run, compile=False, max_model_len=4 * s.max_prompt_len + s.max_tokens,
                          kv_cache_gib=1, draft_tokens=s.draft_tokens)  # fmt: skip
    logs = s.out or s.run / "parity"
    logs.mkdir(parents=True, exist_ok=True)
    with served("vllm", target, servers, bench, logs, who="parity") as urls:
        return parity(s.model_copy(update={"endpoint": urls["plain"], "draft_endpoint": urls["export"]}))


def _line(report: dict[str, Any]) -> str:
    t = report["target"]
    text = (f"(a) target: mean |Δ log p| {t['mean_abs_logprob_diff']:.4f} (≤ {t['thresholds']['mean_abs_logprob_diff']}), "
            f"greedy agreement {t['greedy_agreement']:.3f} (≥ {t['thresholds']['greedy_agreement']}) over "
            f"{t['tokens']} tokens: {'ok' if t['ok'] else 'FAILED'}")  # fmt: skip
    if d := report.get("drafter"):
        text += (f"\n(b) drafter: our acceptance length {d['our_acceptance_length']:.3f}, engine MAL "
                 f"{d['engine_mal']}, gap {d['relative_gap']} (≤ {d['threshold']}): {'ok' if d['ok'] else 'FAILED'}")  # fmt: skip
    return text


@settings_command(ParitySettings, exclude={"run"})
def parity_command(
    settings: ParitySettings,
    run: Path = typer.Argument(Path("runs/latest"), help="A run directory (runs/<name> or runs/latest)."),
) -> None:
    """Compare the trainer's target and drafter with what a serving engine computes (the parity gate)."""
    settings = settings.model_copy(update={"run": run})
    if settings.launch and not (have := availability()).ok:
        typer.echo(f"parity: not run: {have.line()}", err=True)
        return
    if not settings.launch and not settings.endpoint:
        typer.echo("parity: give --endpoint URL (and --draft-endpoint URL), or --launch", err=True)
        raise typer.Exit(2)
    try:
        report = launched(settings) if settings.launch else parity(settings)
    except (ParityError, ReplayError, httpx.HTTPError) as e:
        typer.echo(f"parity: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(_line(report))
    export = settings.run / "export"
    if export.is_dir() and "drafter" in report:
        mark = {"ok": report["ok"], "override": settings.override and not report["ok"], **report}
        (export / "parity.json").write_text(json.dumps(mark, indent=2) + "\n")
    if not report["ok"]:
        verdict = "kept, marked as failing (override)" if settings.override else "refused"
        typer.echo(f"parity: FAILED: the export is {verdict}; see {settings.run / 'parity.json'}", err=True)
        if not settings.override:
            raise typer.Exit(1)


class ParityError(TrainerError, RuntimeError):
    """The gate could not be run (an endpoint refused, no prompts, no counters)."""
