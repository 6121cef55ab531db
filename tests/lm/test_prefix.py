"""The prefix cache: what it serves equals a fresh prefill, and it forwards only what it has not seen."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import torch

from lm import Autoregressive, Engine, SamplingParams, Target
from lm.prefix import PrefixCache, prefilled
from lm.standin.server import TargetServer
from tests.lm.conftest import Live, live

LAYERS = [0, 1]


def _prompt(tiny: Target, text: str) -> list[int]:
    return tiny.render([{"role": "user", "content": text}])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_a_cached_prefill_equals_a_fresh_one_and_forwards_only_the_new_tokens(tiny: Target) -> None:
    long = _prompt(tiny, "Explain the difference between a list and a tuple in Python, with examples.")
    short = long[: len(long) // 2]
    cache = PrefixCache(LAYERS)
    fresh = prefilled(tiny, long, LAYERS)

    first = prefilled(tiny, short, LAYERS, cache)
    assert cache.forwarded == len(short)
    extended = prefilled(tiny, long, LAYERS, cache)  # the short prompt's positions are not run again
    assert cache.forwarded == len(long)
    assert _same(extended.logits, fresh.logits)
    assert extended.taps is not None
    assert fresh.taps is not None
    assert _same(extended.taps, fresh.taps)
    assert extended.cache.get_seq_length() == len(long)

    again = prefilled(tiny, long, LAYERS, cache)  # a whole hit: nothing forwarded
    assert cache.forwarded == len(long)
    assert _same(again.logits, fresh.logits)
    # the short prompt was dropped once its continuation was kept: one token runs again for its logits
    back = prefilled(tiny, short, [LAYERS[1]], cache)
    assert cache.forwarded == len(long) + 1
    assert first.taps is not None
    assert back.taps is not None
    assert _same(back.logits, first.logits)
    assert _same(back.taps, first.taps[..., tiny.hidden_size :])


def test_callers_own_their_cache_copy_and_the_budget_drops_the_oldest(tiny: Target) -> None:
    a, b = _prompt(tiny, "first question"), _prompt(tiny, "a different second question")
    cache = PrefixCache(max_tokens=len(a) + len(b) - 1)
    got = prefilled(tiny, a, prefix=cache)
    got.cache.crop(-3)  # the caller extends or crops its copy; the cached entry stays whole
    assert _same(prefilled(tiny, a, prefix=cache).logits, got.logits)
    assert cache.forwarded == len(a)
    common = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    prefilled(tiny, b, prefix=cache)  # from a's template prefix; over the budget, `a` goes
    assert cache.forwarded == len(a) + len(b) - common
    prefilled(tiny, a, prefix=cache)  # from b's: `a` itself is gone
    assert cache.forwarded == 2 * (len(a) - common) + len(b)


def test_decoding_from_a_prefix_cache_decodes_the_same(tiny: Target) -> None:
    prompt = _prompt(tiny, "Write a haiku about the sea.")
    params = SamplingParams(12, temperature=0)
    plain = [t for s in Engine(tiny).steps(prompt, params) for t in s.token_ids]
    cache = PrefixCache()
    cached = Engine(tiny, Autoregressive(prefix=cache))
    for _ in range(2):  # the second decode starts from the cached prompt
        assert [t for s in cached.steps(prompt, params) for t in s.token_ids] == plain
    assert cache.forwarded == len(prompt)


def test_the_last_layers_tap_through_the_final_norm_and_head_is_the_models_logits(tiny: Target) -> None:
    prompt = _prompt(tiny, "Explain recursion in one sentence.")
    taps = prefilled(tiny, prompt, [tiny.num_layers - 1], PrefixCache()).taps
    assert taps is not None
    ours = tiny.lm_head(tiny.final_norm(taps[0]))
    theirs = tiny.forward(torch.tensor([prompt])).logits[0]
    assert _same(ours, theirs)


def test_a_hit_makes_a_prompt_the_last_to_be_dropped(tiny: Target) -> None:
    a, b, c = (_prompt(tiny, t) for t in ("alpha question", "beta question here", "gamma question again"))
    cache = PrefixCache(max_tokens=len(a) + len(c) + 1)  # room for two of the three
    for p in (a, b, a, c):  # `a` used again after `b`: `b` is the least recently used when `c` comes
        prefilled(tiny, p, prefix=cache)
    before = cache.forwarded
    prefilled(tiny, a, prefix=cache)
    assert cache.forwarded == before  # still cached: a whole hit
    prefilled(tiny, b, prefix=cache)
    assert cache.forwarded > before  # dropped: run again past the shared template prefix


def test_the_server_reuses_a_turns_prefix_and_answers_as_without_it(tiny: Target) -> None:
    """The stand-in server with a prefix cache (`serve-target --prefix-cache-tokens`, on by default):
    an agent's next call forwards only what the last call did not, concurrent requests interleave over
    the one cache, and every answer is the one a server without the cache gives."""
    first = [{"role": "user", "content": "List the files of the repository, then read the README."}]
    turn = [*first, {"role": "assistant", "content": "ls -la"}, {"role": "user", "content": "README.md src"}]
    other = [{"role": "user", "content": "A different task altogether: fix the failing test."}]
    cache = PrefixCache(max_tokens=4096)
    cached = TargetServer(tiny, engine=Engine(tiny, Autoregressive(prefix=cache)), max_model_len=512)
    plain = TargetServer(tiny, max_model_len=512)
    with live(cached) as c, live(plain) as p:

        def ask(server: Live, messages: list[dict[str, str]]) -> list[int]:
            body = {
                "model": server.server.model_name,
                "messages": messages,
                "max_tokens": 8,
                "temperature": 0,
            }
            reply = httpx.post(f"{server.url}/v1/chat/completions", json={**body, "return_token_ids": True})
            return list(reply.json()["choices"][0]["token_ids"])

        assert ask(c, first) == ask(p, first)
        before = cache.forwarded
        assert ask(c, turn) == ask(p, turn)
        ids, earlier = tiny.render(turn), tiny.render(first)
        common = next((i for i, (x, y) in enumerate(zip(earlier, ids, strict=False)) if x != y), len(earlier))
        assert cache.forwarded - before == len(ids) - common  # the shared prefix was not run again
        with ThreadPoolExecutor(3) as pool:  # interleaved by the scheduler, over the one cache
            answers = list(pool.map(lambda m: ask(c, m), [turn, other, first]))
        assert answers == [ask(p, turn), ask(p, other), ask(p, first)]
