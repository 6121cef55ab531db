"""``python -m trainer eval RUN_DIR``: tau by real speculative decoding, and the lossless check.

On held-out prompts (the eval split of the run's data: every supervised span's context is one prompt),
the in-process target decodes greedily twice: plainly, and speculatively with the drafter (it proposes
B-1 tokens per step, the target verifies them in one forward, the matching prefix plus one bonus token is
accepted). Reported:

- ``tau``: mean tokens produced per target verify forward (accepted drafts + the bonus), over all steps;
- ``acceptance_length``: vLLM's ``1 + accepted / drafts`` (equal to tau when nothing was truncated);
- ``per_position_acceptance``: the fraction of steps whose draft k was accepted, k = 1..B-1;
- tau per agent and per language;
- ``lossless``: the speculative tokens equal the plain greedy tokens on every prompt, or part from them
  only at a near-tie. A verify pass over B tokens and a plain decode step run different kernel shapes,
  and their rounding (bf16 above all) can flip the argmax where the target's top two tokens are nearly
  tied: at the first differing position the target's own top-2 log-probability gap after the common
  prefix classifies each divergence as a ``near_tie`` (within the precision the target computes in:
  trainer/precision.py) or a ``mismatch`` (a bug). ``exact``, ``divergences`` and ``mismatch_rate`` report them; only a mismatch fails ``eval``.

Writes ``eval.json`` and ``acceptance.png`` into the run directory (or ``--out``).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from lm import load_target
from lm.engine import Autoregressive, Engine, SamplingParams
from lm.prefix import PrefixCache
from trainer.data.build import read
from trainer.dflash.engine import speculative
from trainer.dflash.kinds import load_drafter
from trainer.heldout import context_phrase, paired_context_verdict
from trainer.lossless import divergences
from trainer.precision import NEAR_TIE, NearTieRule


@dataclass
class Prompt:
    ids: list[int]
    agent: str
    language: str
    session_id: str | None
    truncated: bool = False  # the context's last max_prompt_len tokens only


def held_out_prompts(eval_parquet: Path, n: int, max_prompt_len: int) -> list[Prompt]:
    """Up to ``n`` prompts from the held-out sequences written by the data build."""
    return prompts_from_sequences(read(eval_parquet) if eval_parquet.exists() else [], n, max_prompt_len)


def prompts_from_sequences(seqs: list[Any], n: int, max_prompt_len: int) -> list[Prompt]:
    """The context before each supervised span is one prompt; taken round-robin over sequences (so
    sessions, agents and languages mix), at most ``max_prompt_len`` tokens long.

    Agent prompts often exceed a CPU's evaluation budget (a Claude Code call starts at ≈ 5–12k tokens):
    when fewer than ``n`` contexts fit, the longer ones are evaluated on their last ``max_prompt_len``
    tokens (``truncated``; both the plain and the speculative decode see the same window, so tau and the
    lossless check stay exact for it), rather than reporting no held-out prompt at all."""
    max_prompt_len = max_prompt_len if max_prompt_len > 0 else 1 << 30  # 0: whole prompts
    fitting, windows = [], []
    for s in seqs:
        fitting.append([_prompt(s, start) for start in s.span_starts if 0 < start <= max_prompt_len])
        windows.append(
            [_prompt(s, start, max_prompt_len) for start in s.span_starts if start > max_prompt_len]
        )
    out = _round_robin(fitting, n)
    return out + _round_robin(windows, n - len(out))


def _prompt(seq: Any, start: int, window: int | None = None) -> Prompt:
    lo = max(0, start - window) if window else 0
    return Prompt(seq.input_ids[lo:start], seq.agent, seq.lang, seq.session_id, truncated=lo > 0)


def _round_robin(queues: list[list[Prompt]], n: int) -> list[Prompt]:
    out: list[Prompt] = []
    depth = 0
    while len(out) < n and any(len(q) > depth for q in queues):
        for q in queues:
            if depth < len(q) and len(out) < n:
                out.append(q[depth])
        depth += 1
    return out


def _decode(engine: Any, prompt: list[int], max_new: int) -> tuple[list[int], list[int], float]:
    """(tokens, tokens settled per forward after the first token, seconds)."""
    params = SamplingParams(max_tokens=max_new, temperature=0.0)
    t0 = time.perf_counter()
    chunks = [s.token_ids for s in engine.steps(prompt, params)]
    dt = time.perf_counter() - t0
    settled = [len(c) for c in chunks if c]
    return [t for c in chunks for t in c], settled[1:], dt


def _compare(
    plain: Engine, spec: Engine, p: Prompt, max_new: int, rule: NearTieRule
) -> tuple[dict[str, Any], list[int], float, float]:
    """One prompt decoded plainly and speculatively: its row in eval.json, tokens settled per verify
    forward, and the two decode times."""
    ref, _, t_plain = _decode(plain, p.ids, max_new)
    got, settled, t_spec = _decode(spec, p.ids, max_new)
    found = divergences(plain.target, p.ids, ref, got, lambda ids, n: _decode(plain, ids, n)[0], rule)
    kinds = {d.kind for d in found}
    kind = "mismatch" if "mismatch" in kinds else ("near_tie" if kinds else None)
    row = {
        "agent": p.agent,
        "language": p.language,
        "prompt_tokens": len(p.ids),
        "generated": len(got),
        "verify_steps": len(settled),
        "tau": round(sum(settled) / len(settled), 4) if settled else None,
        "lossless": kind != "mismatch",
        "exact": got == ref,
        "first_mismatch": found[0].position if found else None,
        "divergence": kind,
        "divergences": [
            {
                "position": d.position,
                "top2_gap": round(d.top2_gap, 5),
                "top_logit": d.top_logit,
                "kind": d.kind,
            }
            for d in found
        ],
    }
    return row, settled, t_plain, t_spec


def evaluate(
    run_dir: str | Path,
    *,
    drafter_dir: str | Path | None = None,
    target: Any = None,
    n_prompts: int | None = None,
    max_new_tokens: int | None = None,
    max_prompt_len: int | None = None,
    block_size: int | None = None,
    prompts: list[Prompt] | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    device: str | None = None,
    dtype: str | None = None,
    near_tie: float = NEAR_TIE,
    prefix: PrefixCache | None = None,
    check: bool = True,
) -> dict[str, Any]:
    """``check``: also the context check (``context_check``). ``device`` (default: cuda when there is one, else cpu) and ``dtype`` (default: bfloat16 on a GPU,
    float32 on a CPU) are where and how the target is loaded; the drafter follows it. Each prompt is
    prefilled once for both decodes (``prefix``, or a cache of this call's own)."""
    run = Path(run_dir).resolve()
    cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").exists() else {}
    n_prompts = n_prompts or int(cfg.get("eval_prompts", 8))
    max_new = max_new_tokens or int(cfg.get("eval_max_new_tokens", 64))
    # 0: the whole prompt, as the engine serves it (tau and the engine's MAL then measure the same)
    if max_prompt_len is None:
        max_prompt_len = int(cfg.get("eval_max_prompt_len", 2048) or 0)
    if target is None:
        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        kind = getattr(torch, dtype or ("bfloat16" if dev.startswith("cuda") else "float32"))
        target = load_target(cfg.get("target", "smollm2"), dtype=kind, device=dev)
    drafter = load_drafter(drafter_dir or run / "drafter")
    if prompts is None:
        prompts = held_out_prompts(run / "data" / "eval.parquet", n_prompts, max_prompt_len)
    if not prompts:
        raise SystemExit(f"no held-out prompts in {run / 'data' / 'eval.parquet'}")

    prefix = prefix or PrefixCache(drafter.target_layer_ids)
    plain = Engine(target, Autoregressive(prefix=prefix))
    strategy = speculative(drafter, block_size=block_size, prefix=prefix)
    spec = Engine(target, strategy)
    b = strategy.block_size
    rule = NearTieRule(str(target.embed_tokens.weight.dtype), floor=near_tie)
    per_prompt = []
    groups: dict[str, dict[str, list[int]]] = {"agent": defaultdict(list), "language": defaultdict(list)}
    plain_s = spec_s = 0.0
    for i, p in enumerate(prompts):
        row, settled, t_plain, t_spec = _compare(plain, spec, p, max_new, rule)
        per_prompt.append(row)
        plain_s += t_plain
        spec_s += t_spec
        groups["agent"][p.agent].extend(settled)
        groups["language"][p.language].extend(settled)
        if progress:
            typer.echo(
                f"  prompt {i + 1}/{len(prompts)}: {len(p.ids)} tokens, tau {row['tau']}, lossless {row['lossless']}"
            )
    stats = strategy.spec_stats
    assert stats is not None
    context = (
        context_check(target, drafter, prompts, per_prompt, max_new, block_size, prefix) if check else {}
    )
    all_steps = [n for g in groups["agent"].values() for n in g]
    result: dict[str, Any] = {
        "tau": round(sum(all_steps) / len(all_steps), 4) if all_steps else 0.0,
        "lossless": all(r["lossless"] for r in per_prompt),
        "exact": all(r["exact"] for r in per_prompt),
        "mismatch_rate": round(sum(not r["lossless"] for r in per_prompt) / len(per_prompt), 4),
        "divergences": {
            kind: sum(d["kind"] == kind for r in per_prompt for d in r["divergences"])
            for kind in ("near_tie", "mismatch")
        },
        "near_tie": rule.as_dict(),
        "dtype": str(target.embed_tokens.weight.dtype).removeprefix("torch."),
        "per_position_acceptance": [round(n / max(1, stats.num_drafts), 4) for n in stats.accepted_per_pos],
        "n_prompts": len(prompts),
        "prompts_truncated": sum(p.truncated for p in prompts),
        "acceptance_length": round(1 + stats.num_accepted_tokens / max(1, stats.num_drafts), 4),
        "num_drafts": stats.num_drafts,
        "num_draft_tokens": stats.num_draft_tokens,
        "num_accepted_tokens": stats.num_accepted_tokens,
        "block_size": b,
        "max_new_tokens": max_new,
        "tau_by_agent": {k: round(sum(v) / len(v), 4) for k, v in sorted(groups["agent"].items()) if v},
        "tau_by_language": {k: round(sum(v) / len(v), 4) for k, v in sorted(groups["language"].items()) if v},
        "target": cfg.get("target", getattr(target, "name", None)),
        "drafter": str(Path(drafter_dir or run / "drafter")),
        "seconds": {"plain": round(plain_s, 2), "speculative": round(spec_s, 2)},
        **context,
        "prompts": per_prompt,
    }
    out = Path(out_dir) if out_dir else run
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    plot_acceptance(result, out / "acceptance.png")
    return result


def context_check(
    target: Any,
    drafter: Any,
    prompts: list[Prompt],
    rows: list[dict[str, Any]],
    max_new: int,
    block_size: int | None,
    prefix: PrefixCache,
) -> dict[str, Any]:
    """Does the drafter read its context? The same prompts decoded speculatively a third time with the
    drafter given other positions' features (``speculative(scramble=True)``; each prompt's prefill is the
    prefix cache's already): tau per prompt beside the real one, and the paired verdict over sessions
    (``trainer.heldout.paired_context_verdict``). A drafter that accepts no less ignores its context."""
    scrambled = Engine(target, speculative(drafter, block_size=block_size, prefix=prefix, scramble=True))
    by_unit: dict[str, list[float]] = defaultdict(list)
    steps: list[int] = []
    for i, (p, row) in enumerate(zip(prompts, rows, strict=True)):
        _, settled, _ = _decode(scrambled, p.ids, max_new)
        steps += settled
        row["tau_scrambled"] = round(sum(settled) / len(settled), 4) if settled else None
        if row["tau"] is not None and row["tau_scrambled"] is not None:
            by_unit[p.session_id or f"prompt {i}"].append(row["tau"] - row["tau_scrambled"])
    tau = round(sum(steps) / len(steps), 4) if steps else None
    return {"tau_scrambled": tau, **paired_context_verdict(by_unit)}


def plot_acceptance(result: dict[str, Any], path: Path) -> None:
    # matplotlib is imported here, not at the top: it is the `train` extra's plotting dependency, takes
    # about a second to import, and only this one function of the trainer draws anything.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = result["per_position_acceptance"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar(range(1, len(acc) + 1), acc, color="#3b7dd8")
    ax.set_xlabel("draft position k")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(1, len(acc) + 1))
    verdict = "lossless" if result["lossless"] else "NOT lossless"
    ax.set_title(
        f"DFlash per-position acceptance — tau {result['tau']:.2f}, {result['n_prompts']} prompts, {verdict}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class EvalSettings(BaseModel):
    """`python -m trainer eval`: what to decode and where the results go (defaults: the run's config)."""

    model_config = ConfigDict(extra="forbid")

    drafter: Path | None = Field(None, description="A drafter directory; default RUN_DIR/drafter.")
    prompts: int | None = Field(None, ge=1, description="Held-out prompts; default the run's eval_prompts.")
    max_new_tokens: int | None = Field(None, ge=1, description="Tokens generated per prompt.")
    max_prompt_len: int | None = Field(
        None,
        ge=0,
        description="Each prompt's last tokens at most; 0: the whole prompt, as the engine serves it; default "
        "the run's eval_max_prompt_len.",
    )
    block_size: int | None = Field(None, ge=2, description="Verify block size; default the drafter's.")
    out: Path | None = Field(None, description="Where eval.json and acceptance.png go; default RUN_DIR.")
    device: str | None = Field(
        None, description="Where the target runs: cuda, cuda:1, cpu; default cuda if any."
    )
    dtype: Literal["bfloat16", "float16", "float32"] | None = Field(
        None, description="The target's dtype; default bfloat16 on a GPU, float32 on a CPU."
    )
    near_tie: float = Field(
        NEAR_TIE,
        ge=0,
        description="A divergence where the target's top-2 log-probabilities are closer than this (nats) "
        "is always a near-tie (rounding), reported; more where the target's dtype is coarser (a few of its "
        "steps at the top logit's magnitude); a wider gap is a mismatch and fails the check.",
    )


@settings_command(EvalSettings)
def eval_command(
    settings: EvalSettings,
    run_dir: Path = typer.Argument(Path("runs/latest"), help="A run directory (runs/<name> or runs/latest)."),
) -> None:
    """Tau by greedy speculative decoding on held-out prompts, and the lossless check against plain greedy."""
    r = evaluate(
        run_dir,
        drafter_dir=settings.drafter,
        n_prompts=settings.prompts,
        max_new_tokens=settings.max_new_tokens,
        max_prompt_len=settings.max_prompt_len,
        block_size=settings.block_size,
        out_dir=settings.out,
        device=settings.device,
        dtype=settings.dtype,
        near_tie=settings.near_tie,
    )
    acc = " ".join(f"{a:.2f}" for a in r["per_position_acceptance"])
    typer.echo(
        f"tau {r['tau']:.3f} on {r['n_prompts']} held-out prompts (block {r['block_size']}); lossless: {str(r['lossless']).lower()}"
    )
    ties, bad = r["divergences"]["near_tie"], r["divergences"]["mismatch"]
    typer.echo(f"divergences from plain greedy: {ties} near-ties, {bad} mismatches ({r['near_tie']['rule']})")
    typer.echo(f"per-position acceptance: {acc}")
    typer.echo(f"tau by agent: {r['tau_by_agent']}; by language: {r['tau_by_language']}")
    if r.get("context_gain") is not None:
        ci = r["context_gain_ci"]
        over = f"{r['context_units']} sessions" + (
            ", resampling prompts" if r["context_resampled"] == "block" else ""
        )
        interval = f" [{ci[0]:+.3f}, {ci[1]:+.3f}] over {over}" if ci else ""
        typer.echo(
            f"context check: tau {r['tau_scrambled']} with its features scrambled (gain {r['context_gain']:+.3f}"
            f"{interval}): the drafter {context_phrase(r['context'])}"
        )
    if not r["lossless"]:
        raise typer.Exit(1)
