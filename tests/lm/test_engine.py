"""The generation engine: greedy equals Hugging Face's own decode, sampling, stops, and the strategy seam."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from lm import (
    Autoregressive,
    DecodingStrategy,
    Engine,
    Sampler,
    SamplingParams,
    SpecDecodeStats,
    Target,
)

PROMPTS = [
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
]


def hf_greedy(target: Target, prompt: list[int], n: int) -> list[int]:
    out = target.model.generate(
        torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=list(target.stop_token_ids)
    )
    return list(out[0, len(prompt) :].tolist())


def test_greedy_equals_hugging_face_generate(tiny: Target) -> None:
    engine = Engine(tiny)
    runs = [list(engine.generate(tiny.render(messages), 16, temperature=0)) for messages in PROMPTS]
    assert runs == [hf_greedy(tiny, tiny.render(messages), 16) for messages in PROMPTS]
    assert all(len(set(run)) > 5 for run in runs)  # tiny-qwen3 wanders, so a broken cache would show
    assert list(engine.generate(tiny.render(PROMPTS[0]), 16, temperature=0)) == runs[0]


def test_chunked_prefill_decodes_the_same(tiny: Target) -> None:
    prompt = tiny.render(PROMPTS[1])
    whole = list(Engine(tiny).generate(prompt, 16, temperature=0))
    steps = list(
        Engine(tiny, Autoregressive(prefill_chunk=5)).steps(prompt, SamplingParams(16, temperature=0))
    )
    n_chunks = -(-len(prompt) // 5)
    assert [s.token_ids for s in steps[: n_chunks - 1]] == [[]] * (n_chunks - 1)
    assert [t for s in steps for t in s.token_ids] == whole


def test_seeded_sampling_is_reproducible_and_private(tiny: Target) -> None:
    engine = Engine(tiny)
    prompt = tiny.render(PROMPTS[0])
    a = list(engine.generate(prompt, 8, temperature=1.0, top_p=0.9, seed=7))
    torch.manual_seed(999)  # the global RNG plays no part in a seeded request
    b = list(engine.generate(prompt, 8, temperature=1.0, top_p=0.9, seed=7))
    c = list(engine.generate(prompt, 8, temperature=1.0, top_p=0.9, seed=8))
    assert a == b
    assert a != c


def test_stop_tokens_and_lengths(tiny: Target) -> None:
    engine = Engine(tiny)
    prompt = tiny.render(PROMPTS[0])
    greedy = list(engine.generate(prompt, 10, temperature=0))
    stop_at = greedy[3]
    first = greedy.index(stop_at)
    steps = list(engine.steps(prompt, SamplingParams(10, temperature=0, stop_token_ids=frozenset({stop_at}))))
    assert [t for s in steps for t in s.token_ids] == greedy[: first + 1]  # the stop token is output
    assert (steps[-1].finish_reason, steps[-1].stop_token_id) == ("stop", stop_at)
    capped = list(engine.steps(prompt, SamplingParams(4, temperature=0)))
    assert [t for s in capped for t in s.token_ids] == greedy[:4]
    assert capped[-1].finish_reason == "length"
    assert [(s.token_ids, s.finish_reason) for s in engine.steps(prompt, SamplingParams(0))] == [
        ([], "length")
    ]


def test_eos_stops_unless_ignored(tiny: Target) -> None:
    class Says:
        name, spec_stats = "says", None

        def steps(
            self, target: Target, prompt_ids: list[int], sampler: Sampler, max_new_tokens: int
        ) -> Iterator[list[int]]:
            yield [11, 151_645, 12]

    engine = Engine(tiny, Says())
    steps = list(engine.steps([1, 2], SamplingParams(10)))
    assert steps[-1].token_ids == [11, 151_645]
    assert steps[-1].finish_reason == "stop"
    assert steps[-1].stop_token_id is None  # EOS is not a `stop_reason`, as in vLLM
    ignored = list(engine.steps([1, 2], SamplingParams(10, ignore_eos=True)))
    assert [t for s in ignored for t in s.token_ids] == [11, 151_645, 12]
    assert ignored[-1].finish_reason == "length"


def test_a_multi_token_strategy_plugs_in_and_is_truncated_and_closed(tiny: Target) -> None:
    closed: list[bool] = []

    class Speculative:
        name = "fake-speculative"

        def __init__(self) -> None:
            self.spec_stats: SpecDecodeStats | None = SpecDecodeStats()

        def steps(
            self, target: Target, prompt_ids: list[int], sampler: Sampler, max_new_tokens: int
        ) -> Iterator[list[int]]:
            try:
                yield []  # a prefill chunk
                while True:
                    assert self.spec_stats is not None
                    self.spec_stats.record(num_draft_tokens=3, num_accepted=2)
                    yield [5, 6, 7]  # two accepted drafts + the bonus token
            finally:
                closed.append(True)

    strategy = Speculative()
    assert isinstance(strategy, DecodingStrategy)
    steps = list(Engine(tiny, strategy).steps([1], SamplingParams(7)))
    assert [s.token_ids for s in steps] == [[], [5, 6, 7], [5, 6, 7], [5]]
    assert steps[-1].finish_reason == "length"
    assert closed == [True]
    assert strategy.spec_stats == SpecDecodeStats(3, 9, 6, [3, 3, 0])


def test_sampler_filters() -> None:
    logits = torch.tensor([4.0, 3.0, 2.0, -1.0])
    top_k = Sampler(SamplingParams(1, temperature=1.0, top_k=2)).probs(logits)
    assert top_k[2:].sum() == 0
    assert torch.isclose(top_k.sum(), torch.tensor(1.0))
    top_p = Sampler(SamplingParams(1, temperature=1.0, top_p=0.5)).probs(logits)
    assert top_p.nonzero().flatten().tolist() == [0]  # the top token alone already has ≥ 0.5
    hot = Sampler(SamplingParams(1, temperature=100.0)).probs(logits)
    assert hot.max() - hot.min() < 0.05
    assert int(Sampler(SamplingParams(1, temperature=0.0)).sample(logits)) == 0
    batch = Sampler(SamplingParams(1, temperature=1.0, seed=3)).sample(torch.zeros(5, 7))
    assert batch.shape == (5,)
