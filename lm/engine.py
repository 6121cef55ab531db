"""Token generation for one request at a time, with a pluggable decoding strategy.

`Engine` owns the request-level rules (sampling parameters, stop tokens, `max_tokens`, finish reasons);
a `DecodingStrategy` owns how tokens are produced from the model. The default, `Autoregressive`, is one
token per cached forward. A speculative strategy (DFlash drafter + target verification) plugs in by
yielding several accepted tokens per step and counting its drafts in a `SpecDecodeStats`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from lm.model import Target
from lm.prefix import PrefixCache, prefill

SAMPLING_EPS = 1e-5  # vLLM's: a temperature below this is greedy


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    seed: int | None = None
    stop_token_ids: frozenset[int] = frozenset()  # in addition to the model's EOS ids
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS


class Sampler:
    """Turns logits into tokens for one request; a seeded request owns its generator, so its samples do
    not depend on what else the server is doing."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.generator: torch.Generator | None = None
        if params.seed is not None and not params.greedy:
            self.generator = torch.Generator().manual_seed(params.seed)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution actually sampled from ([..., V] → [..., V]): temperature, then top-k and
        top-p filtering. For rejection sampling in a speculative strategy."""
        p = self.params
        logits = logits.float() / max(p.temperature, SAMPLING_EPS)
        if 0 < p.top_k < logits.shape[-1]:
            kth = torch.topk(logits, p.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if p.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            sorted_probs = sorted_logits.softmax(dim=-1)
            # drop a token when the tokens ranked above it already reach top_p (the top one always stays)
            drop = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= p.top_p
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
        return logits.softmax(dim=-1)

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., V] logits → [...] token ids (argmax when greedy)."""
        if self.greedy:
            return logits.argmax(dim=-1)
        probs = self.probs(logits)
        flat = probs.reshape(-1, probs.shape[-1])
        return torch.multinomial(flat, 1, generator=self.generator).reshape(probs.shape[:-1])


@dataclass
class SpecDecodeStats:
    """vLLM's speculative-decoding counters (served on /metrics as `vllm:spec_decode_*`).
    Mean acceptance length = 1 + num_accepted_tokens / num_drafts."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def record(self, num_draft_tokens: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        if len(self.accepted_per_pos) < num_draft_tokens:
            self.accepted_per_pos.extend([0] * (num_draft_tokens - len(self.accepted_per_pos)))
        for pos in range(num_accepted):
            self.accepted_per_pos[pos] += 1


@runtime_checkable
class DecodingStrategy(Protocol):
    """How tokens are produced. `steps` yields, once per target forward, the list of token ids that
    forward settled (empty for a prefill chunk; one for plain decoding; 1 + accepted drafts for
    speculative decoding). It may yield more than `max_new_tokens` in total: the engine truncates and then
    closes the iterator, so work after the last needed yield never runs. It must sample through
    `sampler` (greedy when `sampler.greedy`). `spec_stats` is None for non-speculative strategies."""

    name: str
    spec_stats: SpecDecodeStats | None

    def steps(
        self, target: Target, prompt_ids: list[int], sampler: Sampler, max_new_tokens: int
    ) -> Iterator[list[int]]: ...


class Autoregressive:
    """One token per forward on a KV cache; long prompts are prefilled in chunks so that a scheduler can
    interleave other requests between them, or from a `PrefixCache` when one is given."""

    name = "autoregressive"
    spec_stats: SpecDecodeStats | None = None

    def __init__(self, prefill_chunk: int = 512, prefix: PrefixCache | None = None) -> None:
        self.prefill_chunk = prefill_chunk
        self.prefix = prefix

    def steps(
        self, target: Target, prompt_ids: list[int], sampler: Sampler, max_new_tokens: int
    ) -> Iterator[list[int]]:
        pre = yield from prefill(target, prompt_ids, (), self.prefill_chunk, self.prefix)
        cache, logits, dev = pre.cache, pre.logits, target.device
        for _ in range(max_new_tokens):
            token = int(sampler.sample(logits))
            yield [token]
            logits = target.forward(torch.tensor([[token]], device=dev), cache, logits_to_keep=1).logits[
                0, -1
            ]


@dataclass
class Step:
    """Token ids settled by one forward; `finish_reason` ('stop' | 'length') on the last step, with
    `stop_token_id` set when a non-EOS stop token ended it (vLLM's `stop_reason`)."""

    token_ids: list[int]
    finish_reason: str | None = None
    stop_token_id: int | None = None


class Engine:
    """Generates for one request at a time (callers serialise; the server's scheduler does)."""

    def __init__(self, target: Target, strategy: DecodingStrategy | None = None) -> None:
        self.target = target
        self.strategy: DecodingStrategy = strategy or Autoregressive()

    def steps(self, prompt_ids: list[int], params: SamplingParams) -> Generator[Step, None, None]:
        """One `Step` per forward until a stop token or `max_tokens`; the last one has a finish reason.
        The stop token itself is part of the output ids (as in vLLM), not of the text."""
        eos = set() if params.ignore_eos else set(self.target.stop_token_ids)
        stops = eos | set(params.stop_token_ids)
        produced = 0
        if params.max_tokens <= 0:
            yield Step([], "length")
            return
        inner = self.strategy.steps(self.target, list(prompt_ids), Sampler(params), params.max_tokens)
        try:
            for chunk in inner:
                out: list[int] = []
                for token in chunk:
                    out.append(token)
                    produced += 1
                    if token in stops:
                        yield Step(out, "stop", None if token in eos else token)
                        return
                    if produced >= params.max_tokens:
                        yield Step(out, "length")
                        return
                yield Step(out)
            yield Step([], "length")  # the strategy ran out (end of context)
        finally:
            close = getattr(inner, "close", None)
            if close is not None:
                close()

    def generate(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_token_ids: Iterable[int] = (),
    ) -> Iterator[int]:
        """The generated token ids one by one (the closing stop token included)."""
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop_token_ids=frozenset(stop_token_ids),
        )
        for step in self.steps(prompt_ids, params):
            yield from step.token_ids
