"""Held-out prompts for `trainer eval`: contexts that fit first, then windows of the longer ones."""

from __future__ import annotations

from types import SimpleNamespace

from trainer.evaluate import prompts_from_sequences
from trainer.parity import gate_prompts
from trainer.parity_settings import ParitySettings


def _seq(n: int, starts: list[int], agent: str = "claude-code") -> SimpleNamespace:
    return SimpleNamespace(
        input_ids=list(range(n)), span_starts=starts, agent=agent, lang="en", session_id=f"s{n}"
    )


def test_contexts_that_fit_come_first_and_whole() -> None:
    got = prompts_from_sequences([_seq(100, [10, 50]), _seq(100, [20])], n=2, max_prompt_len=64)
    assert [p.ids for p in got] == [list(range(10)), list(range(20))]
    assert not any(p.truncated for p in got)


def test_agent_contexts_longer_than_the_budget_are_evaluated_on_their_last_tokens() -> None:
    # every context is longer than the budget (as a Claude Code call's 5k+ tokens on a CPU budget of 1024)
    got = prompts_from_sequences(
        [_seq(6000, [5000, 5900], "claude-code"), _seq(3000, [2000], "codex")], n=3, max_prompt_len=1024
    )
    assert [len(p.ids) for p in got] == [1024, 1024, 1024]
    assert all(p.truncated for p in got)
    assert got[0].ids == list(range(5000 - 1024, 5000))  # the window ends where the supervised span starts
    assert {p.agent for p in got} == {"claude-code", "codex"}


def test_windows_only_fill_what_fitting_contexts_leave() -> None:
    got = prompts_from_sequences([_seq(4000, [30, 3000])], n=2, max_prompt_len=512)
    assert [(len(p.ids), p.truncated) for p in got] == [(30, False), (512, True)]


def test_the_parity_gate_adds_the_longest_whole_prompt_that_fits_the_served_context() -> None:
    seqs = [_seq(20000, [600, 13000, 19990]), _seq(5000, [400, 4000], "codex")]
    s = ParitySettings(prompts=2, max_prompt_len=1024, long_prompts=1, max_model_len=16384, max_tokens=32)
    got = gate_prompts(seqs, s)
    assert [(len(p.ids), p.truncated) for p in got] == [(600, False), (400, False), (13000, False)]
    assert len(gate_prompts(seqs, s.model_copy(update={"long_prompts": 0}))) == 2


def test_a_budget_of_zero_means_whole_prompts_as_the_engine_serves_them() -> None:
    got = prompts_from_sequences([_seq(20000, [13000, 19000])], n=2, max_prompt_len=0)
    assert [(len(p.ids), p.truncated) for p in got] == [(13000, False), (19000, False)]
