"""The parity gate's settings (trainer/parity.py runs the checks, trainer/parity_cli.py is the command)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


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
    probe_lr: float = Field(
        3e-3,
        gt=0,
        description="The throwaway's AdamW learning rate (3e-2 left a drafter unable to learn the gate's "
        "prompts; 3e-3 reads its context in 60 passes: docs/serving.md).",
    )
    dtype: str | None = Field(
        None,
        description="The dtype the engine computes in (float32, bfloat16): (a)'s near-tie rule; with --launch, "
        "the dtype its servers serve (default float32: the exact comparison; bfloat16 checks a bf16 serving).",
    )
    logprob_tol: float = Field(0.05, ge=0, description="(a) mean |Δ log p| per prompt token, nats.")
    greedy_min: float = Field(0.98, ge=0, le=1, description="(a) next-token agreement, near-ties excluded.")
    near_tie: float = Field(
        0.1, ge=0, description="A top-2 gap (nats) under which a flipped argmax is rounding."
    )
    mal_gap: float = Field(0.05, ge=0, description="(b) |our acceptance length − engine MAL| / engine MAL.")
    out: Path | None = Field(None, description="Where parity.json goes; default RUN.")
