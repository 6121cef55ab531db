"""What limits learning, in minutes: one recipe change at a time on small data, judged on held-out blocks.

    python benchmarks/learning_ablation.py --data trainer/data/sample/smollm2 \\
        --taps 1,8,14,20,27 --labels greedy --supervise all --steps 300 > ablation.jsonl

The target's features and greedy tokens of every sequence are computed once (the trainer's own
``Target.greedy_ids`` and taps), then a one-layer drafter trains one sequence a step with the trainer's
objective (``dflash_loss``; ``--labels``/``--supervise`` as in ``TrainConfig``, ``layout.greedy_targets``
for greedy labels). Every ``--eval-every`` steps it prints one JSON line: the held-out blocks' accepted
length along the target's greedy chain on the recorded completions (what ``trainer.heldout`` measures
during training) with the features and with them scrambled (rolled half the sequence). A quick harness
for choosing what to change; the recipe's own curve comes from ``trainer train`` (heldout.jsonl).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lm import load_target
from trainer.data import build as data_build
from trainer.dflash import helpers as H
from trainer.dflash import layout as L
from trainer.dflash.config import make_draft_config, resolve_mask_token
from trainer.dflash.model import DFlashDraftModel
from trainer.dflash.objective import dflash_loss

Example = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # taps, ids, labels, mask


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="trainer/data/sample/smollm2")
    p.add_argument("--taps", default="15", help="Tapped target layers, comma-separated.")
    p.add_argument("--labels", choices=("text", "greedy"), default="text")
    p.add_argument("--supervise", choices=("completions", "all"), default="completions")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--anchors", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--eval-every", type=int, default=100)
    a = p.parse_args()
    torch.manual_seed(0)
    target = load_target("smollm2")
    taps = [int(x) for x in a.taps.split(",")]
    built = data_build.build(target, a.data, eval_fraction=0.15, max_context=8192)
    t0 = time.perf_counter()
    train = [example(target, s, taps, a.labels, a.supervise) for s in built.train]
    held = [example(target, s, taps, "greedy", "completions") for s in built.eval]
    print(
        json.dumps({"sequences": [len(train), len(held)], "features_s": round(time.perf_counter() - t0, 1)})
    )
    mask_id, _ = resolve_mask_token(target.tokenizer, target.embed_tokens.weight.shape[0])
    cfg = make_draft_config(
        target.model.config,
        num_hidden_layers=1,
        block_size=a.block,
        mask_token_id=mask_id,
        target_layer_ids=taps,
    )
    drafter = DFlashDraftModel(cfg)
    opt = torch.optim.AdamW(drafter.parameters(), lr=a.lr)
    embed, head = target.embed_tokens.weight.detach(), target.lm_head.weight.detach()
    weights = H.loss_weights(a.block, H.default_gamma(a.block))
    gen = torch.Generator().manual_seed(0)

    def loss(x: Example, n: int, scramble: bool = False):  # type: ignore[no-untyped-def]
        feats, ids, labels, mask = x
        if scramble:
            feats = feats.roll(feats.shape[1] // 2, dims=1)
        anchors = H.sample_anchors(mask, n, gen)
        kw = dict(embed_weight=embed, lm_head_weight=head, block_size=a.block, mask_token_id=mask_id)
        return dflash_loss(
            drafter,
            taps=feats,
            input_ids=ids,
            loss_mask=mask,
            anchors=anchors,
            weights=weights,
            label_ids=labels,
            **kw,
        )  # type: ignore[arg-type]

    t0 = time.perf_counter()
    for step in range(a.steps + 1):
        if step % a.eval_every == 0:
            with torch.no_grad():
                drafter.eval()
                row = {"step": step, "s": round(time.perf_counter() - t0)}
                for name, scramble in (("tau", False), ("tau_scrambled", True)):
                    n = torch.cat([loss(x, 10**9, scramble).accepted for x in held if x[3].sum() > 1])
                    row[name], row["blocks"] = round(1 + float(n.float().mean()), 4), int(n.numel())
                drafter.train()
            print(json.dumps(row), flush=True)
        if step == a.steps:
            break
        out = loss(train[step % len(train)], a.anchors)
        for group in opt.param_groups:  # 20 warmup steps, then cosine
            group["lr"] = a.lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()


def example(target, seq, taps: list[int], labels: str, supervise: str) -> Example:  # type: ignore[no-untyped-def]
    """A sequence's features, its ids, and its labels and label mask by the trainer's rules."""
    ids = torch.tensor(seq.input_ids)
    with target.greedy_ids() as found:
        feats = target.tap(ids[None], taps)
    mask = torch.ones_like(ids) if supervise == "all" else torch.tensor(seq.loss_mask)
    if labels == "text":
        return feats, ids, ids, mask
    label_ids, mask = L.greedy_targets(ids, found[0][0], mask, L.Layout.single(ids.numel(), ids.device))
    return feats, ids, label_ids, mask


if __name__ == "__main__":
    main()
