"""Session merge, held-out split by repository, cuts at span boundaries (pure token lists, no target)."""

from __future__ import annotations

import itertools
from collections import Counter

from trainer.data.build import (
    Sequence,
    build_from_examples,
    cut,
    merge_sessions,
    read,
    split_groups,
    write,
)
from trainer.data.records import CallExample, Report


def call(
    cid: str, session: str | None, t: float, prompt: list[int], completion: list[int], repo: str | None = None
) -> CallExample:
    return CallExample(cid, session, t, prompt, completion, [1] * len(completion), "stored", repo=repo)


def test_calls_that_resend_the_history_merge_into_one_sequence() -> None:
    system = list(range(100, 110))
    c1 = call("c1", "s", 1, [*system, 1, 2], [3, 4, 5])
    c2 = call("c2", "s", 2, [*system, 1, 2, 3, 4, 5, 6, 7], [8, 9])  # history + tool result
    c3 = call("c3", "s", 3, [*system, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11, 12])
    side = call("side", "s", 2.5, [*system, 42], [43, 44])  # a title call: shares only the system prompt
    seqs = merge_sessions([c3, side, c1, c2])
    assert len(seqs) == 2
    main = next(s for s in seqs if s.call_ids[0] == "c1")
    assert main.call_ids == ["c1", "c2", "c3"]
    assert main.input_ids == c3.prompt_ids + c3.completion_ids
    assert main.span_starts == [12, 17, 20]
    assert main.span_ends == [15, 19, 22]
    expected = [0] * 12 + [1, 1, 1] + [0, 0] + [1, 1] + [0] + [1, 1]
    assert main.loss_mask == expected  # earlier completions stay supervised; new prompt parts do not


def test_merge_needs_an_exact_token_prefix() -> None:
    a = call("a", "s", 1, [1, 2, 3], [4, 5])
    b = call("b", "s", 2, [1, 2, 3, 4, 6, 7], [8, 9])  # the model said 5; the history says 6: no merge
    other = call("o", "t", 3, [1, 2, 3, 4, 5, 9], [8, 9])  # another session never merges
    assert len(merge_sessions([a, b, other])) == 3


def test_the_report_gives_the_reduction_in_target_tokens() -> None:
    c1 = call("c1", "s", 1, [1] * 100, [2, 3])
    c2 = call("c2", "s", 2, [1] * 100 + [2, 3] + [4] * 10, [5, 6])
    res = build_from_examples([c1, c2], Report(), max_len=1000, eval_fraction=0.0)
    m = res.report["merge"]
    assert m["target_tokens_per_call"] == 102 + 114
    assert m["target_tokens_merged"] == 114
    assert m["reduction"] == round(216 / 114, 3)


_calls = itertools.count()


def _seq(unit: str) -> Sequence:
    """A one-call sequence of repository `repo:R`, or of session `session:S`."""
    kind, name = unit.split(":")
    if kind == "repo":
        return Sequence([1, 2, 3], [0, 1, 1], [1], [3], None, name, call_ids=[f"c{next(_calls)}"])
    return Sequence([1, 2, 3], [0, 1, 1], [1], [3], name, call_ids=["c"])


def test_split_is_by_repository_and_stable() -> None:
    seqs = [_seq(f"repo:r{i % 20}") for i in range(200)]
    split_groups(seqs, 0.2)
    sides: dict[str, set[str]] = {}
    for s in seqs:
        sides.setdefault(s.group, set()).add(s.split)
    assert all(len(v) == 1 for v in sides.values())  # no repository on both sides
    held = {g for g, v in sides.items() if v == {"test"}}
    assert 0 < len(held) < 20
    again = [_seq(f"repo:r{i % 20}") for i in range(200)]
    split_groups(again, 0.2)
    assert [s.split for s in again] == [s.split for s in seqs]


def test_split_gives_both_sides_something_when_it_can() -> None:
    seqs = [_seq("session:a"), _seq("session:b")]
    split_groups(seqs, 0.01)
    assert sorted(s.split for s in seqs) == ["test", "train"]


def test_an_export_that_held_out_whole_sessions_keeps_its_split_per_session() -> None:
    """With one repository the export holds out whole sessions (test-* and train-* files both hold that
    repository's rows): the trainer keeps each session's side, not one side for the whole repository."""
    examples = []
    for i, hint in enumerate(["train", "test", "train", "test", "train"]):
        ex = call(f"c{i}", f"s{i}", i, [7, i, 8], [9, 10], repo="dflash-sample/textkit")
        ex.split_hint = hint
        examples.append(ex)
    res = build_from_examples(examples, Report(), max_len=100, eval_fraction=0.1)
    assert sorted(s.session_id or "" for s in res.eval) == ["s1", "s3"]
    assert sorted(s.session_id or "" for s in res.train) == ["s0", "s2", "s4"]
    assert res.report["split"]["by"] == "dataset split (whole sessions held out)"
    # an export split by repository reads as such
    for ex in examples:
        ex.split_hint = "test" if ex.call_id == "c0" else "train"
        ex.repo = "held/out" if ex.call_id == "c0" else "other/repo"
    res = build_from_examples(examples, Report(), max_len=100, eval_fraction=0.1)
    assert [s.session_id for s in res.eval] == ["s0"]
    assert res.report["split"]["by"] == "dataset split (whole repositories held out)"


def test_long_sequences_are_cut_at_span_ends_never_inside_a_span() -> None:
    # prompt 0..9, span 10..19, prompt 20..29, span 30..34, prompt 35..39, span 40..59, span too long 60..99
    n = 100
    mask = [0] * n
    spans = [(10, 20), (30, 35), (40, 60), (62, 100)]
    for s, e in spans:
        for i in range(s, e):
            mask[i] = 1
    seq = Sequence(
        list(range(n)),
        mask,
        [s for s, _ in spans],
        [e for _, e in spans],
        "s",
        "g",
        call_ids=["a", "b", "c", "d"],
    )
    dropped: Counter[str] = Counter()
    pieces = cut(seq, 30, dropped)
    assert dropped == {"span_longer_than_max_len": 1}
    covered = []
    for p in pieces:
        assert len(p.input_ids) <= 30
        assert p.span_ends[-1] == len(p.input_ids)  # ends where a span ends
        first = p.input_ids[0]
        assert not any(s < first < e for s, e in spans)  # does not start inside a span
        for s, e in zip(p.span_starts, p.span_ends, strict=True):
            covered.append((p.input_ids[s], p.input_ids[e - 1] + 1))
            assert all(p.loss_mask[s:e])
    assert covered == spans[:3]  # every span that fits survives whole, once


def test_built_data_round_trips_through_parquet(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c1 = call("c1", "s1", 1, [1, 2, 3], [4, 5, 6], repo="org/a")
    c2 = call("c2", "s2", 1, [1, 2, 3], [7, 8, 9], repo="org/b")
    res = build_from_examples([c1, c2], Report(), max_len=100, eval_fraction=0.5)
    write(res, tmp_path)
    back = read(tmp_path / "train.parquet") + read(tmp_path / "eval.parquet")
    assert sorted(s.input_ids for s in back) == [[1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8, 9]]
    assert {s.split for s in back} == {"train", "test"}
    assert (tmp_path / "report.json").exists()


def test_one_repository_holds_out_whole_sessions_and_says_so() -> None:
    # what `make harvest` records: every session works on the same repository
    calls = [call(f"c{i}", f"s{i}", i, [1, 2, i + 10], [4, 5, 6], repo="org/only") for i in range(6)]
    res = build_from_examples(calls, Report(), max_len=100, eval_fraction=0.1)
    assert res.eval
    assert res.train
    assert res.report["split"]["by"] == "session"
    assert "whole sessions held out" in res.report["split"]["note"]
    held = {s.session_id for s in res.eval}
    assert not held & {s.session_id for s in res.train}  # no session on both sides


def test_one_session_holds_out_a_whole_sequence() -> None:
    # two chains in one session (the second call does not extend the first), one repository
    calls = [call("a", "s", 1, [1, 2, 3], [4, 5, 6], repo="r"), call("b", "s", 2, [9, 9], [7, 8], repo="r")]
    res = build_from_examples(calls, Report(), max_len=100, eval_fraction=0.1)
    assert len(res.eval) == 1
    assert len(res.train) == 1
    assert res.report["split"]["by"] == "sequence"
