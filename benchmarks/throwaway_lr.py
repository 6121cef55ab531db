"""How the parity gate's throwaway drafter learns the gate's prompts, by passes and learning rate.

    .venv/bin/python benchmarks/throwaway_lr.py RUN [STEPS:LR ...]      # e.g. runs/latest 60:3e-2 60:3e-3

For each STEPS:LR, the gate's own code end to end without a server: `throwaway` (trainer/parity_probe.py)
overfits RUN/drafter on RUN's held-out gate prompts' greedy continuations and exports it, and
`feature_checks` (trainer/parity_features.py) reads its teacher-forced acceptance length with its own
features and with every position given another's (check (d)'s scrambled reading). A throwaway that proves
the export path needs the first well over the gate's `min_mal` and the second well under it.
Results: docs/serving.md ("Measured on SmolLM2").
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from trainer.parity import run_prompts, run_target
from trainer.parity_features import feature_checks
from trainer.parity_probe import throwaway
from trainer.parity_settings import ParitySettings


def main() -> None:
    run = Path(sys.argv[1]).resolve()
    variants = [(int(a), float(b)) for a, b in (v.split(":") for v in sys.argv[2:] or ["60:3e-3"])]
    s = ParitySettings.model_validate({"run": run})
    target, prompts = run_target(run), run_prompts(s)
    print("prompts:", [len(p.ids) for p in prompts], flush=True)
    for steps, lr in variants:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            probe = throwaway(run, target, prompts, s.max_tokens, Path(out), steps=steps, lr=lr)
            read = feature_checks(probe, target, prompts, s.max_tokens, s.mal_gap)["sensitivity"]
        tf, change = read["teacher_forced_acceptance"], read["relative_change"]["scrambled"]
        print(
            f"{steps} passes, lr {lr:g}: teacher-forced {tf['export']:.3f}, scrambled {tf['scrambled']:.3f} "
            f"({change:+.1%}), {time.perf_counter() - started:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
