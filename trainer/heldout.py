"""The learning curve: held-out acceptance every ``eval_every`` optimizer steps, and whether the drafter
reads its context.

Each evaluation drafts a block at every anchor of the held-out split's recorded completions (the first
``heldout_tokens`` target positions of it, the target's features computed once and kept) and scores it
along the target's own greedy chain (``layout.greedy_targets``): a drafted token counts while every
token before it in the block was accepted and the text still follows what greedy decoding emits. That is
the acceptance greedy speculative decoding gets from these contexts, without running the decoder (real
tau comes from ``python -m trainer eval`` after training). The same blocks are drafted a second time with
every position's target features replaced by another position's (rolled half the step): a drafter that
accepts no less without its features ignores its context, whatever its loss says.

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
BOOTSTRAP = 2000  # resamples of held-out sessions for the context gain's interval


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
        # greedy labels on the recorded completions, whatever the run trains on: what the bench drafts
        # (a feature source has no logits: there the completions' own tokens)
        labels = labels if cfg.feature_source == "hf" else "text"
        self.cfg = cfg.model_copy(update={"labels": labels, "supervise": "completions"})
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

    @torch.no_grad()
    def run(
        self, acc: Accelerator, target: Target, d: Drafting, weights: torch.Tensor, flex: bool
    ) -> dict[str, Any]:
        b = self.cfg.block_size
        plain, scrambled = Tally(b), Tally(b)
        d.model.eval()
        for i in range(len(self.steps)):
            step = self._step(i, target, d, acc.device)
            anchors = torch.nonzero(L.candidates(step.cpu_mask, step.cpu_layout or step.layout)).flatten()
            roll = step.taps.roll(step.taps.shape[1] // 2, dims=1)  # every position another's features
            sessions = [s.seq.session_id or s.seq.sequence_id for u in self.steps[i] for s in u.segments]
            for start in range(0, anchors.numel(), ANCHOR_CHUNK):
                part = anchors[start : start + ANCHOR_CHUNK]
                keys = [sessions[s] for s in (step.cpu_layout or step.layout).seg[part].tolist()]
                plain.add(step_loss(d, target, step, part, block_size=b, weights=weights, flex=flex), keys)
                off = dataclasses.replace(step, taps=roll)
                scrambled.add(step_loss(d, target, off, part, block_size=b, weights=weights, flex=flex), keys)
        d.model.train()
        rec = plain.summary()
        rec["tau_scrambled"] = scrambled.summary()["tau"]
        rec.update(context_verdict(plain, scrambled))
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
    are not independent of each other). The mean, its 95 % interval by resampling units, and the
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
        "context_units": len(sums),
        "context": verdict,
    }


def line(rec: dict[str, Any]) -> str:
    """The progress output's line for one evaluation."""
    accept = " ".join(f"{a:.2f}" for a in rec["accept"][:6])
    ci = rec.get("context_gain_ci")
    gain = "" if ci is None else f", gain [{ci[0]:+.3f}, {ci[1]:+.3f}]"
    return (
        f"held-out @ step {rec['step']}: tau {rec['tau']:.3f} (features scrambled {rec['tau_scrambled']:.3f}"
        f"{gain}: {rec['context']}) accept@1..6 {accept} over {rec['blocks']} blocks, loss {rec['loss']:.3f}"
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
    ax.plot(steps, [r["tau"] for r in records], "o-", label="drafter")
    ax.plot(steps, [r["tau_scrambled"] for r in records], "x--", label="features scrambled")
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.set(xlabel="optimizer step", ylabel="held-out tau (greedy chain)", title="learning curve")
    ax.legend()
    last = records[-1]
    bx.bar(range(1, len(last["accept"]) + 1), last["accept"])
    bx.set(xlabel="draft position", ylabel="accepted fraction", title=f"step {last['step']}", ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
