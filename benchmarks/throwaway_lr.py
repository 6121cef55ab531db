"""How the parity gate's throwaway drafter learns the gate's prompts, by passes and learning rate.

    .venv/bin/python benchmarks/throwaway_lr.py RUN [STEPS:LR ...]      # e.g. runs/latest 60:3e-2 60:3e-3

Loads RUN's target, drafter and held-out gate prompts exactly as `python -m trainer parity` does, decodes
each prompt's greedy continuation, then for each STEPS:LR overfits a fresh copy of RUN/drafter on those
pairs (trainer/parity_probe.py `overfit_on`) and prints its teacher-forced acceptance length on them, with
its own features and with every position given another's (the scrambled reading of check (d)): a
throwaway that proves the export path needs the first well over the gate's `min_mal` and the second well
under it. Results: docs/serving.md ("The throwaway").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from trainer.dflash.kinds import load_drafter
from trainer.dflash.model import DFlashDraftModel
from trainer.drafting import frozen_weight
from trainer.parity import run_prompts, run_target
from trainer.parity_features import _slots, gate_layers
from trainer.parity_probe import greedy, layer_features, overfit_on, prefix_cache
from trainer.parity_settings import ParitySettings


def main() -> None:
    run = Path(sys.argv[1]).resolve()
    variants = [(int(a), float(b)) for a, b in (v.split(":") for v in sys.argv[2:] or ["60:3e-3"])]
    s = ParitySettings.model_validate({"run": run})
    target, prompts = run_target(run), run_prompts(s)
    base = load_drafter(run / "drafter").float()
    layers = gate_layers([list(base.target_layer_ids)], target.num_layers)
    prefix_cache(target, layers)
    embed = frozen_weight(target.embed_tokens).detach().float()
    head = frozen_weight(target.lm_head).detach().float()
    pairs = [(p.ids, greedy(target, p.ids, s.max_tokens)) for p in prompts]
    print("prompts:", [len(p) for p, _ in pairs], flush=True)

    @torch.no_grad()
    def accepts(d: DFlashDraftModel) -> tuple[float, float]:
        own, scrambled = [], []
        for p, c in pairs:
            ids, mask = torch.tensor(p + c), torch.tensor([0] * len(p) + [1] * len(c))
            feats = layer_features(target, p + c, layers)
            own.append(_slots(d, feats, ids, mask, embed, head)[1])
            moved = {k: v.roll(v.shape[0] // 2, dims=0) for k, v in feats.items()}
            scrambled.append(_slots(d, moved, ids, mask, embed, head)[1])
        return 1 + float(torch.cat(own).float().mean()), 1 + float(torch.cat(scrambled).float().mean())

    own, scrambled = accepts(base.eval())
    print(f"run's drafter: teacher-forced {own:.3f}, scrambled {scrambled:.3f}", flush=True)
    for steps, lr in variants:
        torch.manual_seed(0)
        started = time.perf_counter()
        d = overfit_on(load_drafter(run / "drafter").float(), target, pairs, steps, lr)
        own, scrambled = accepts(d)
        print(
            f"{steps} passes, lr {lr:g}: teacher-forced {own:.3f}, scrambled {scrambled:.3f} "
            f"({(scrambled - own) / own:+.1%}), {time.perf_counter() - started:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
