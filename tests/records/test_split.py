"""`records.split`: the one held-out rule the export, the trainer and the replay share."""

from __future__ import annotations

from records.split import TEST, TRAIN, Unit, fraction, plan


def test_whole_repositories_are_held_out_stably_and_never_straddle() -> None:
    units = [Unit(f"s{i}", f"owner/repo{i % 20}") for i in range(200)]
    first, again = plan(units, 0.2), plan(list(reversed(units)), 0.2)
    assert first.by == "repository"
    assert first.sides == again.sides  # the order units come in changes nothing
    sides: dict[str, set[str]] = {}
    for u in units:
        sides.setdefault(u.repo or "", set()).add(first.side(u.key))
    assert all(len(v) == 1 for v in sides.values())
    assert 0 < sum(v == {TEST} for v in sides.values()) < 20
    # the hash is the repository's name, whatever its case: the same side in every stage
    assert fraction("Owner/Repo3") == fraction("owner/repo3")


def test_both_sides_get_a_repository_when_the_hash_gives_one_side_all() -> None:
    units = [Unit("a", "o/x"), Unit("b", "o/y")]
    low = plan(units, 1e-9)
    assert sorted(low.sides.values()) == [TEST, TRAIN]
    high = plan(units, 1.0)
    assert sorted(high.sides.values()) == [TEST, TRAIN]


def test_one_repository_holds_out_whole_sessions_and_a_single_session_nothing() -> None:
    units = [Unit(f"s{i}", "o/only") for i in range(10)]
    p = plan(units, 0.15)
    assert p.by == "session"
    assert len(p.held_out) == 2  # ceil-ish of 0.15 * 10, never all
    assert "whole sessions held out" in p.note
    alone = plan([Unit("s0", "o/only")], 0.5)
    assert alone.by == "none"
    assert alone.held_out == set()
    # sessions without calls never decide the sides, but follow their repository's
    with_empty = plan([Unit("a", "o/x", 3), Unit("b", "o/y", 0), Unit("c", "o/z", 2)], 0.5)
    assert with_empty.by == "repository"


def test_nothing_is_held_out_when_nothing_is_asked() -> None:
    p = plan([Unit("a", "o/x"), Unit("b", "o/y")], 0.0)
    assert p.by == "none"
    assert p.held_out == set()
