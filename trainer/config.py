"""The run config: one pydantic model, read from a YAML file plus ``key=value`` overrides.

Every default lives here once. ``python -m trainer train`` generates its options from this model
(``clikit.settings_command``); a YAML file and ``--set key=value`` overrides are merged first and the
whole result is validated by the same model, so ``lr: 1e-4`` (a string to YAML 1.1) is a float and an
unknown or mistyped key is an error that names the key.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainer.dflash.kinds import KINDS
from trainer.errors import TrainerError
from trainer.launch import Launch
from trainer.sources.vllm import VllmSourceSettings


class ConfigError(TrainerError, ValueError):
    """A run config that does not validate; the message names every offending key."""


class TrainConfig(BaseModel):
    """Everything a training run reads; written to ``runs/<name>/config.yaml``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # what to train for, on what
    target: str = Field("smollm2", description="smollm2, tiny-qwen3, or a Hugging Face model directory.")
    data: str = Field(
        "data",
        description="An exported dataset (its `sequences` config: DATA_DIR/dataset, an export folder, or a "
        "Hub dataset id), else call records (DATA_DIR/calls, a folder, a file, s3://…).",
    )
    sample_fallback: bool = Field(False, description="No records under `data`: use the bundled sample.")
    model_filter: str | None = Field(None, description="Keep only calls whose `model` column equals this.")
    runs_dir: str = Field("runs", description="Where run directories are created.")
    name: str | None = Field(
        None, description="Run name (re-using one resumes it); default <date>-<time>-<target>."
    )
    # the drafter (defaults: the released Qwen3-8B drafter's shape)
    num_layers: int = Field(5, ge=1, description="Drafter decoder layers.")
    drafter: str = Field(
        "dflash",
        description="Drafter kind: " + "; ".join(f"{n} ({k.describe})" for n, k in KINDS.items()) + ".",
    )

    @field_validator("drafter")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in KINDS:
            raise ValueError(f"unknown drafter kind {value!r}: one of {', '.join(KINDS)}")
        return value

    block_size: int = Field(
        16, ge=2, description="Block size B: the anchor + B-1 drafted tokens (vLLM num_speculative_tokens)."
    )
    regenerated: bool = Field(
        True,
        description="Also train on re-sampled completions (`trainer regenerate`): an export's `regenerated` "
        "sequences, or DATA/regenerated beside call records.",
    )
    head_rank: int = Field(
        64, ge=1, description="dspark: the Markov head's rank; dflash2: the candidate selector's rank."
    )
    head_weight: float = Field(
        1.0,
        ge=0,
        description="Weight of the kind's head loss beside the cross-entropy (dspark: the "
        "confidence head's; dflash2: the selector's).",
    )
    selector_top_k: int = Field(8, ge=1, description="dflash2: candidates per slot the selector ranks.")
    conv_kernel_size: int = Field(2, ge=1, description="dflash2: taps of the in-block convolution.")
    conv_group_size: int = Field(
        64,
        ge=1,
        description="dflash2: channels sharing one convolution coefficient (divides the hidden size).",
    )
    target_layer_ids: list[int] | None = Field(
        None, description="Tapped target layers; default num_taps of them, spread from 1 to n-3."
    )
    num_taps: int | None = Field(
        None,
        ge=1,
        description="Target layers tapped when target_layer_ids is unset, spread from 1 to n-3 (at most the "
        "target's layers less one); default one per drafter layer. A one-layer drafter reads the late "
        "layers, where the target's next tokens are, only with several taps.",
    )
    mask_token_id: int | None = Field(None, description="Mask token id; default chosen from the tokenizer.")
    intermediate_size: int | None = Field(None, description="Drafter MLP width; default the target's.")
    # data
    max_len: int = Field(
        3072,
        ge=8,
        description="Target tokens computed per step: the packing budget (a longer sequence is a step of its "
        "own, its features still from its whole context).",
    )
    packing: bool = Field(False, description="Pack several sequences per step up to max_len target tokens.")
    prefix_sharing: bool = Field(
        True, description="Compute the target once per common prefix of a session's consecutive sequences."
    )
    eval_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="Held-out share of the groups.")
    labels: Literal["text", "greedy"] = Field(
        "text",
        description="text: each position's own token; greedy: the target's greedy chain (its argmax, from the "
        "forward that gives the features), what greedy decoding accepts: a block's slots are labels while the "
        "text follows that chain. greedy needs feature_source=hf.",
    )
    supervise: Literal["completions", "all"] = Field(
        "completions",
        description="Which positions are labels: the recorded completions (the sequences' loss mask), or all "
        "(the prompts' tool output, code and text too: with greedy labels, what the target would say there).",
    )
    # optimisation (the DFlash paper's recipe)
    epochs: float = Field(6.0, gt=0, description="Passes over the training sequences.")
    lr: float = Field(6e-4, gt=0, description="Peak learning rate (AdamW).")
    warmup: float = Field(0.04, ge=0, le=1, description="Warmup, as a fraction of the optimizer steps.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine floor, as a fraction of lr.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, ge=0, description="Gradient norm clip (0: off).")
    anchors: int = Field(
        512,
        ge=1,
        description="Anchored blocks per sequence (per segment of a packed step), sharing its features; "
        "per `anchor_tokens` supervised tokens when that is set.",
    )
    anchor_tokens: int | None = Field(
        None,
        ge=1,
        description="Budget `anchors` per this many supervised tokens of a sequence (rounded up), so a "
        "session merged into one long sequence gets the anchors of all its calls. None: `anchors` is a flat "
        "cap per sequence.",
    )
    step_anchors: int | None = Field(
        None,
        ge=1,
        description="At most this many anchored blocks in one step over all its segments (drawn from each "
        "segment's, uniformly): the drafter's queries are step_anchors × block_size, what bounds a packed "
        "step's memory. None: `anchors` per segment only.",
    )
    gamma: float | None = Field(
        None, gt=0, description="Loss decay; default 7 for B=16, 5 for B=10, 4 for B=8."
    )
    grad_accum: int = Field(1, ge=1, description="Micro-batches per optimizer step.")
    max_steps: int | None = Field(
        None, ge=1, description="Stop after this many optimizer steps (overrides epochs)."
    )
    max_minutes: float | None = Field(
        None,
        gt=0,
        description="A time budget: stop training after this many minutes of the loop (all ranks at the same "
        "step); the drafter is saved, evaluated and exported as at that step. None: no budget.",
    )
    seed: int = Field(0, description="Seed of the sequence order, anchors and initialisation.")
    activation_checkpointing: bool = Field(
        False,
        description="Recompute each drafter layer in backward: one layer's activations alive at a time "
        "(a Qwen3-8B drafter at 32k query slots: 43 GiB -> about 9; `trainer plan-memory`), about a third "
        "more compute per step.",
    )
    dist_timeout_minutes: float = Field(
        60.0,
        gt=0,
        description="How long a rank waits at a collective: rank 0 builds the data and loads the target "
        "while the others wait (NCCL's default, 10 minutes, is shorter than a large export's build).",
    )
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = Field(
        "auto", description="auto: bf16 on GPU, float32 on CPU."
    )
    target_device_map: str | None = Field(
        None,
        description="Online mode, one process: shard the target over the visible GPUs with this accelerate "
        "device_map (e.g. auto) when it does not fit on one.",
    )
    cache_features: bool = Field(
        False, description="Keep each sequence's target features in RAM (tiny data)."
    )
    # where the target's taps come from (trainer/sources; docs/trainer.md, "Feature sources")
    feature_source: Literal["hf", "cache", "vllm"] = Field(
        "hf",
        description="hf: the target in-process; cache: files in feature_dir; vllm: a vLLM with extraction.",
    )
    feature_dir: str | None = Field(None, description="The cache source's feature directory.")
    vllm: VllmSourceSettings = Field(
        default_factory=lambda: VllmSourceSettings.model_validate({}),
        description="The vllm source: url, launched_aux_layer_ids, local_storage_path, retries.",
    )
    # bookkeeping
    save_every: int = Field(0, ge=0, description="Optimizer steps between checkpoints (0: each epoch end).")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept (oldest deleted).")
    log_every: int = Field(
        10,
        ge=1,
        description="Optimizer steps between metrics lines (each syncs the device to the host and reduces "
        "over the ranks; the CPU config logs every step, which takes seconds there).",
    )
    eval_every: int = Field(
        0,
        ge=0,
        description="Optimizer steps between held-out evaluations (0: off): acceptance along the target's greedy "
        "chain with the drafter's features and scrambled -> heldout.jsonl, heldout.png, a progress line.",
    )
    heldout_tokens: int = Field(
        16384,
        ge=1,
        description="The held-out evaluation's share of the eval split: whole steps up to this many target "
        "positions (their features computed once, at the first evaluation, and kept).",
    )
    trackers: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list,
        description="accelerate trackers to log to besides metrics.jsonl (off by default; wandb needs its login).",
    )
    # what `python -m trainer eval` does with this run by default
    eval_prompts: int = Field(8, ge=1, description="Held-out prompts decoded by `eval`.")
    eval_max_new_tokens: int = Field(64, ge=1, description="Tokens generated per held-out prompt.")
    eval_max_prompt_len: int = Field(
        2048,
        ge=0,
        description="Longest held-out prompt (its last tokens); 0: whole prompts, as the serving engine reads them.",
    )
    # launch settings for `python -m trainer submit` (not used by training itself)
    launch: Launch = Field(
        default_factory=lambda: Launch.model_validate({}), description="How `submit` launches the run."
    )

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        overrides: Sequence[str] = (),
        explicit: Mapping[str, Any] | None = None,
    ) -> TrainConfig:
        """The YAML file, then each ``key=value`` (``launch.nodes=2`` sets one nested key), then
        ``explicit`` values (command-line options), validated together."""
        values: dict[str, Any] = {}
        if path is not None:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
            if not isinstance(loaded, dict):
                raise ConfigError(f"{path}: a run config is a mapping of keys to values")
            values = loaded
        for item in overrides:
            key, sep, raw = item.partition("=")
            if not sep:
                raise ConfigError(f"override {item!r} is not key=value")
            *parents, leaf = key.strip().split(".")
            node = values
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = yaml.safe_load(raw)
        values.update(explicit or {})
        return cls.validated(values)

    @classmethod
    def validated(cls, values: Mapping[str, Any]) -> TrainConfig:
        values = dict(values)
        for old, new in RENAMED.items():  # a run directory written before the rename still resumes
            if old in values and new not in values:
                values[new] = values.pop(old)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ConfigError(describe(exc)) from None

    @model_validator(mode="after")
    def _greedy_in_process(self) -> TrainConfig:
        if self.labels == "greedy" and self.feature_source != "hf":
            raise ValueError(
                "labels=greedy needs the target in-process (feature_source=hf): a feature source has no logits"
            )
        return self

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


# Keys older run directories' config.yaml may hold, and what they are called now.
RENAMED = {"markov_rank": "head_rank", "confidence_weight": "head_weight"}


def describe(exc: ValidationError) -> str:
    """One line per problem, naming the key (unknown keys together)."""
    unknown = [".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden"]
    lines = [f"unknown config keys: {', '.join(unknown)}"] if unknown else []
    for e in exc.errors():
        if e["type"] != "extra_forbidden":
            key = ".".join(str(p) for p in e["loc"])
            lines.append(f"config key {key}: {e['msg']} (got {e.get('input')!r})")
    return "; ".join(lines)


def run_name(cfg: TrainConfig) -> str:
    return cfg.name or f"{time.strftime('%Y%m%d-%H%M%S')}-{Path(cfg.target).name}"
