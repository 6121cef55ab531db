"""The learning curve: held-out acceptance every ``eval_every`` optimizer steps, and whether the drafter
reads its context.

Each evaluation drafts blocks on the held-out split (its first ``heldout_tokens`` target positions, their
features computed once and kept) and scores each along the target's own greedy chain
(``layout.greedy_targets``): a drafted token counts while every token before it in the block was
accepted and the text still follows what greedy decoding emits — the acceptance greedy speculative
decoding gets from these contexts, without running the decoder (real tau comes from ``python -m trainer
eval`` after training). Where the text leaves the chain the block's run ends, so a view whose text was
sampled (a harvest's completions) scores fewer slots than decoding would. Two views: ``completions``
(every anchor of the recorded completions: what the bench drafts) and ``prompts`` (a fixed sample of
anchors over every position: far more blocks). Every block is drafted a second time with every
position's features replaced by another position's (rolled half the step): a drafter that accepts no
less without its features ignores its context, whatever its loss says.

All ranks take part (a sharded drafter needs them); the main process appends one line to
``heldout.jsonl``, redraws ``heldout.png`` and prints one line on the progress output.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from lm.model import Target
from trainer.config import TrainConfig
from trainer.data import build as data_build
from trainer.data.units import Unit, pack, session_units
from trainer.dflash import layout as L
from trainer.drafting import Drafting, step_loss
from trainer.feeding import host_copy, to_device
from trainer.packed import FeatureMemo, PackedStep, step_for

ANCHOR_CHUNK = 256  # blocks drafted per pass: the held-out split's every anchor, a few hundred at a time
PROMPT_ANCHORS = 1024  # the dense view's blocks per evaluation, over every held-out position
BOOTSTRAP = 2000  # resamples of held-out sessions for the context gain's interval
MIN_SESSIONS = 3  # fewer sessions than this are no sample of sessions: the interval resamples blocks


class HeldOut:
    def __init__(self, cfg: TrainConfig, data_dir: Path, labels: str = "greedy") -> None:
        """``labels``: greedy (the target's chain, the judgement) or text (the completions' own tokens:
        random text follows no chain, so a benchmark on a random target times its steps this way)."""
        path = data_dir / "eval.parquet"
        seqs = data_build.read(path) if path.exists() else []
        steps = pack(session_units(seqs, cfg.prefix_sharing), cfg.max_len)
        self.steps: list[list[Unit]] = []
        budget = cfg.heldout_tokens
        for units in steps:  # whole steps, in the split's order, until the budget of target positions
            cost = sum(u.computed for u in units)
            if self.steps and budget - cost < 0:
                break
            self.steps.append(units)
            budget -= cost
        # greedy labels on every position, whatever the run trains on (a feature source has no logits:
        # there the recorded tokens); the completions, what the bench drafts, are a view of the same step
        labels = labels if cfg.feature_source == "hf" else "text"
        self.cfg = cfg.model_copy(update={"labels": labels, "supervise": "all"})
        self._cached: dict[int, PackedStep] = {}
        self._memo = FeatureMemo()  # a split held-out session computed once for all its parts

    def __bool__(self) -> bool:
        return bool(self.steps)

    def _step(self, i: int, target: Target, d: Drafting, device: torch.device) -> PackedStep:
        kept = self._cached.get(i)
        if kept is not None:
            return to_device(kept, device)
        step = step_for(self.cfg, target, self.steps[i], d.layer_ids, device, self._memo)
        self._cached[i] = host_copy(step)  # reused at every evaluation, from host memory
        return step

    def _completions(self, i: int, step: PackedStep) -> PackedStep:
        """The step with only its recorded completions as labels (the greedy chain's rows among them)."""
        segs = [s for u in self.steps[i] for s in u.segments]
        comp = torch.tensor([m for s in segs for m in s.seq.loss_mask[s.shared :]], dtype=torch.long)
        mask = step.cpu_mask * comp
        return dataclasses.replace(step, loss_mask=mask.to(step.loss_mask.device), cpu_mask=mask)

    @torch.no_grad()
    def run(
        self, acc: Accelerator, target: Target, d: Drafting, weights: torch.Tensor, flex: bool
    ) -> dict[str, Any]:
        """Both views, each with the features and scrambled: ``completions`` (every anchor of the recorded
        completions: what the bench drafts, a few hundred blocks) and ``prompts`` (``PROMPT_ANCHORS``
        anchors over every position of the held-out sessions, the same ones each time: the dense view,
        which decides the context check)."""
        b = self.cfg.block_size
        views = {name: (Tally(b), Tally(b)) for name in ("completions", "prompts")}
        per_step = -(-PROMPT_ANCHORS // max(1, len(self.steps)))
        d.model.eval()
        for i in range(len(self.steps)):
            step = self._step(i, target, d, acc.device)
            layout = step.cpu_layout or step.layout
            sessions = [s.seq.session_id or s.seq.sequence_id for u in self.steps[i] for s in u.segments]
            comp = self._completions(i, step)
            every = torch.nonzero(L.candidates(step.cpu_mask, layout)).flatten()
            pick = torch.randperm(every.numel(), generator=torch.Generator().manual_seed(i))[:per_step]
            for name, view, anchors in (
                ("completions", comp, torch.nonzero(L.candidates(comp.cpu_mask, layout)).flatten()),
                ("prompts", step, torch.sort(every[pick]).values),
            ):
                off = dataclasses.replace(view, taps=view.taps.roll(view.taps.shape[1] // 2, dims=1))
                for start in range(0, anchors.numel(), ANCHOR_CHUNK):
                    part = anchors[start : start + ANCHOR_CHUNK]
                    keys = [sessions[s] for s in layout.seg[part].tolist()]
                    for tally, which in zip(views[name], (view, off), strict=True):  # features; scrambled
                        out = step_loss(d, target, which, part, block_size=b, weights=weights, flex=flex)
                        tally.add(out, keys)
        d.model.train()
        rec = views["completions"][0].summary()
        rec["tau_scrambled"] = views["completions"][1].summary()["tau"]
        prompts = views["prompts"][0].summary()
        rec["prompts"] = {**prompts, "tau_scrambled": views["prompts"][1].summary()["tau"]}
        rec.update(context_verdict(*views["prompts"]))
        return rec


@dataclasses.dataclass
class Tally:
    """Accepted draft lengths of held-out blocks, each kept with the session it came from (every rank
    evaluates the same blocks: nothing to reduce)."""

    block_size: int
    accepted: list[torch.Tensor] = dataclasses.field(default_factory=list)  # [A] per chunk
    keys: list[str] = dataclasses.field(default_factory=list)
    loss: float = 0.0
    weight: float = 0.0

    def add(self, out: Any, keys: list[str]) -> None:
        self.accepted.append(out.accepted.cpu())
        self.keys += keys
        self.loss += float(out.loss) * float(out.weight)
        self.weight += float(out.weight)

    def lengths(self) -> torch.Tensor:
        return torch.cat(self.accepted).float() if self.accepted else torch.zeros(0)

    def summary(self) -> dict[str, Any]:
        n = self.lengths()
        k = torch.arange(1, self.block_size, dtype=torch.float32)
        per_pos = (
            (n[:, None] >= k[None, :]).float().mean(0) if n.numel() else torch.zeros(self.block_size - 1)
        )
        return {
            "loss": round(self.loss / max(self.weight, 1e-9), 5),
            "tau": round(1.0 + float(n.mean()) if n.numel() else 1.0, 4),
            "accept": [round(float(a), 4) for a in per_pos],
            "blocks": int(n.numel()),
        }


def context_verdict(plain: Tally, scrambled: Tally) -> dict[str, Any]:
    """``paired_context_verdict`` on the held-out blocks: the difference in each block's accepted length
    with its features and scrambled, grouped by session."""
    by_unit: dict[str, list[float]] = {}  # a held-out session's blocks
    for key, x in zip(plain.keys, (plain.lengths() - scrambled.lengths()).tolist(), strict=True):
        by_unit.setdefault(key, []).append(x)
    return paired_context_verdict(by_unit)


def paired_context_verdict(by_unit: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """Does the drafter read its context? Paired differences (with its features minus scrambled) of
    accepted lengths, grouped by the unit that is independent (a held-out session: its blocks or prompts
    are not independent of each other; with fewer than ``MIN_SESSIONS`` the blocks are resampled, and the
    record says so: the interval then speaks for these sessions only). The mean, its 95 % interval, and the
    verdict: ``reads its context`` when the interval is above 0, ``IGNORES ITS CONTEXT`` when it
    accepts no more with its features than without, ``not resolved`` between (one unit: no interval)."""
    sums = [(sum(v), len(v)) for v in by_unit.values() if v]
    if not sums:
        return {
            "context_gain": None,
            "context_gain_ci": None,
            "context_units": 0,
            "context": "no held-out blocks",
        }
    resampled = "session"
    if len(sums) < MIN_SESSIONS:  # too few to resample: the blocks themselves (what this drafter does here)
        sums, resampled = [(x, 1) for v in by_unit.values() for x in v], "block"
    gain = sum(s for s, _ in sums) / sum(n for _, n in sums)
    rng = random.Random(0)
    boots = []
    for _ in range(BOOTSTRAP if len(sums) > 1 else 0):
        pick = [sums[rng.randrange(len(sums))] for _ in sums]
        boots.append(sum(s for s, _ in pick) / sum(n for _, n in pick))
    boots.sort()
    ci = [boots[int(0.025 * len(boots))], boots[int(0.975 * len(boots)) - 1]] if boots else None
    if gain <= 0:
        verdict = "IGNORES ITS CONTEXT"
    elif ci is not None and ci[0] > 0:
        verdict = "reads its context"
    else:
        verdict = "not resolved"
    return {
        "context_gain": round(gain, 4),
        "context_gain_ci": None if ci is None else [round(c, 4) for c in ci],
        "context_units": len(by_unit),
        "context_resampled": resampled,
        "context": verdict,
    }


def line(rec: dict[str, Any]) -> str:
    """The progress output's line for one evaluation."""
    accept = " ".join(f"{a:.2f}" for a in rec["accept"][:6])
    ci = rec.get("context_gain_ci")
    gain = "" if ci is None else f", gain [{ci[0]:+.3f}, {ci[1]:+.3f}]"
    if ci is not None and rec.get("context_resampled") == "block":
        gain += f" over the blocks of {rec['context_units']} sessions"
    p = rec["prompts"]
    return (
        f"held-out @ step {rec['step']}: completions tau {rec['tau']:.3f} (scrambled {rec['tau_scrambled']:.3f}, "
        f"{rec['blocks']} blocks, accept@1..6 {accept}); prompts tau {p['tau']:.3f} (scrambled "
        f"{p['tau_scrambled']:.3f}, {p['blocks']} blocks{gain}): {rec['context']}"
    )


def plot(records: list[dict[str, Any]], path: Path) -> None:
    """heldout.png: tau against steps, with its features and scrambled, and the last per-position
    acceptance."""
    # imported here, as trainer.evaluate does: the plotting dependency loads only when a curve is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    ax.plot(steps, [r["tau"] for r in records], "o-", label="completions")
    ax.plot(steps, [r["tau_scrambled"] for r in records], "x--", label="completions, features scrambled")
    ax.plot(steps, [r["prompts"]["tau"] for r in records], "s-", label="prompts")
    ax.plot(steps, [r["prompts"]["tau_scrambled"] for r in records], "+--", label="prompts, scrambled")
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.set(xlabel="optimizer step", ylabel="held-out tau (greedy chain)", title="learning curve")
    ax.legend(fontsize=7)
    last = records[-1]
    bx.bar(range(1, len(last["accept"]) + 1), last["accept"])
    bx.set(xlabel="draft position", ylabel="accepted fraction", title=f"step {last['step']}", ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def context_phrase(verdict: str) -> str:
    """A verdict of ``paired_context_verdict`` as a summary line says it."""
    return {
        "reads its context": "reads its context",
        "IGNORES ITS CONTEXT": "IGNORES ITS CONTEXT (it accepts no less without its features)",
        "not resolved": "may or may not read its context (not resolved on this held-out split)",
        "no held-out blocks": "could not be checked (no held-out block to draft)",
    }.get(verdict, verdict)


def summary_line(rec: dict[str, Any]) -> str:
    """The run's last line about its drafter: the curve's last point and its verdict."""
    return (
        f"held-out: tau {rec['tau']:.3f} along the greedy chain, {rec['tau_scrambled']:.3f} with its "
        f"features scrambled: the drafter {context_phrase(rec['context'])} (heldout.png)"
    )
