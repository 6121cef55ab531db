"""The replay's one settings model: its CLI (`python -m trainer replay`) is generated from it."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from trainer.precision import NearTieRule


class Endpoint(BaseModel):
    label: str
    url: str


def parse_endpoint(text: str) -> Endpoint:
    """`label=URL` (http or https; a trailing `/v1` or `/` is dropped: the replay adds the paths)."""
    label, sep, url = text.partition("=")
    label, url = label.strip(), url.strip().rstrip("/")
    if not sep or not label or not url.startswith(("http://", "https://")):
        raise ValueError(f"{text!r} is not LABEL=URL with an http(s) URL, e.g. base=http://127.0.0.1:8000")
    url = url.removesuffix("/v1")
    return Endpoint(label=label, url=url)


class ReplaySettings(BaseModel):
    """Replay held-out recorded calls against OpenAI-compatible endpoints; MAL and speedup per endpoint."""

    data: Path = Field(
        description="Call records: an exported dataset (its held-out `test` split is used) or a calls "
        "folder / Parquet file (held-out by --held-out-from or the trainer's repository hash)."
    )
    endpoint: list[str] = Field(
        min_length=1,
        description="LABEL=URL of an OpenAI-compatible server (vLLM, SGLang, the stand-in); repeat it.",
    )
    baseline: str | None = Field(
        default=None,
        description="The label every other endpoint's speedup is measured against; default the first.",
    )
    speculative: list[str] | None = Field(
        default=None,
        description="Labels served with speculative decoding (they must expose vLLM's spec-decode counters); "
        "default every endpoint but the baseline; `none` for servers without the counters (SGLang).",
    )
    held_out_from: Path | None = Field(
        default=None,
        description="A training run directory: replay the calls of its held-out split (RUN/data/eval.parquet).",
    )
    eval_fraction: float = Field(
        default=0.15,
        gt=0,
        lt=1,
        description="Without an export split or a run: the held-out fraction of repositories, hashed as the "
        "trainer does.",
    )
    calls: int = Field(default=24, ge=1, description="Calls replayed, stratified by agent and language.")
    seed: int = Field(default=0, description="Seed of the stratified sample.")
    max_tokens: int = Field(
        default=256,
        ge=1,
        description="Without --decode-tokens: cap on max_tokens (each call asks for its recorded length).",
    )
    decode_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Tokens every call decodes (temperature 0), whatever its recorded completion's length "
        "(recorded completions were capped by the proxy); an end-of-sequence token still ends a call.",
    )
    min_draft_steps: int = Field(
        default=1000,
        ge=1,
        description="Draft steps each speculative method must be measured on before methods are ranked.",
    )
    rank: bool = Field(
        default=False,
        description="A ranking is asked for: exit 3 when the judgement is below --min-draft-steps.",
    )
    resamples: int = Field(
        default=2000, ge=100, description="Bootstrap resamples over calls (95 % intervals)."
    )
    model_free: list[str] = Field(
        default_factory=list,
        description="Labels of model-free methods (ngram, suffix): they cannot change a correct engine's "
        "argmax, so their divergences, and a drafter's on the same call, are the engine's numerics.",
    )
    dtype: str | None = Field(
        default=None,
        description="The dtype the endpoints compute in (float32, bfloat16): sets the near-tie rule's steps.",
    )
    baseline_logits: bool = Field(
        default=False,
        description="The baseline serves raw logits as log-probabilities (vLLM --logprobs-mode raw_logits): "
        "the top logit's magnitude sets the near-tie rule; without it only the floor (--near-tie) applies.",
    )
    concurrency: list[int] = Field(
        default_factory=lambda: [1, 8],
        description="Concurrency levels, each replayed on every endpoint (default: 1 and 8).",
    )
    out: Path = Field(
        default=Path("runs/replay"), description="Folder for report.json, summary.md and the plots."
    )
    timeout: float = Field(default=900.0, gt=0, description="Seconds one request may take.")
    near_tie: float = Field(
        default=0.1,
        ge=0,
        description="A greedy output that parts from the baseline's where the baseline's top-2 log-probabilities "
        "are this close (nats) is a near-tie of rounding, reported; so is one within a few steps of --dtype at "
        "the top logit's magnitude; a wider gap refuses the run unless a model-free method parts there too.",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoints(cls, value: list[str]) -> list[str]:
        labels = [parse_endpoint(v).label for v in value]
        if len(set(labels)) != len(labels):
            raise ValueError(f"endpoint labels must be unique, got {labels}")
        return value

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, value: list[int]) -> list[int]:
        if not value or any(c < 1 for c in value):
            raise ValueError("concurrency levels must be integers of at least 1")
        return value

    @field_validator("baseline", "speculative", "model_free")
    @classmethod
    def _labels_known(cls, value: str | list[str] | None, info: ValidationInfo) -> str | list[str] | None:
        labels = [parse_endpoint(v).label for v in info.data.get("endpoint") or []]
        given = [value] if isinstance(value, str) else list(value or [])
        unknown = [x for x in given if x not in labels and given != ["none"]]
        if labels and unknown:
            raise ValueError(f"unknown endpoint label(s) {unknown}; the endpoints are {labels}")
        return value

    @property
    def rule(self) -> NearTieRule:
        return NearTieRule(self.dtype or "float32", floor=self.near_tie)

    @property
    def endpoints(self) -> list[Endpoint]:
        return [parse_endpoint(v) for v in self.endpoint]

    @property
    def baseline_label(self) -> str:
        return self.baseline or self.endpoints[0].label

    def is_speculative(self, label: str) -> bool:
        if self.speculative is not None:
            return label in self.speculative  # ["none"]: no endpoint must have the counters
        return label != self.baseline_label
