"""Prefix-aware prompt ids: a row refers to the earlier row of its session sharing the longest prefix, within a
bounded window, and the decoder gives back every id or says clearly that rows were read out of order."""

from __future__ import annotations

import numpy as np
import pytest

from records.dataset import PromptIdsDecoder, PromptIdsEncoder, common_prefix


def ids(*parts: range) -> np.ndarray:
    return np.concatenate([np.arange(p.start, p.stop, dtype=np.int32) for p in parts])


def test_common_prefix() -> None:
    assert common_prefix(ids(range(10)), ids(range(5), range(50, 60))) == 5
    assert common_prefix(ids(range(10)), ids(range(4))) == 4


def test_a_row_refers_to_the_longest_shared_prefix_of_its_own_session() -> None:
    enc = PromptIdsEncoder(min_prefix=4)
    assert enc.encode("a0", "A", ids(range(100)))[0] is None
    assert enc.encode("b0", "B", ids(range(100), range(500, 520)))[0] is None  # never across sessions
    title = ids(range(1000, 1050))  # a side call of session A (title generator): no shared prefix
    assert enc.encode("a1", "A", title)[0] is None
    ref, n, suffix = enc.encode("a2", "A", ids(range(100), range(200, 230)))
    assert (ref, n) == ("a0", 100)
    assert suffix.tolist() == list(range(200, 230))
    assert enc.encode("a3", "A", None) == (None, None, None)


def test_rows_round_trip_in_stored_order_and_the_window_bounds_references() -> None:
    enc, dec = PromptIdsEncoder(window=3, min_prefix=1), PromptIdsDecoder(window=3)
    rng = np.random.default_rng(0)
    history = {s: rng.integers(0, 1000, 20).astype(np.int32) for s in "ABCD"}
    for t in range(6):
        for s in "ABCD":  # four sessions interleaved, window of three rows: references fall out of it
            history[s] = np.concatenate([history[s], rng.integers(0, 1000, 5).astype(np.int32)])
            ref, n, suffix = enc.encode(f"{s}{t}", s, history[s])
            assert ref is None  # the session's previous row is four rows back
            assert dec.decode(f"{s}{t}", ref, n, suffix).tolist() == history[s].tolist()
    enc, dec = PromptIdsEncoder(window=3, min_prefix=1), PromptIdsDecoder(window=3)
    rows = [enc.encode(f"A{t}", "A", history["A"][: 10 + t]) for t in range(5)]
    assert [r[0] for r in rows] == [None, "A0", "A1", "A2", "A3"]
    for t, (ref, n, suffix) in enumerate(rows):
        assert dec.decode(f"A{t}", ref, n, suffix).tolist() == history["A"][: 10 + t].tolist()


def test_reading_out_of_order_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="stored order"):
        PromptIdsDecoder().decode("x1", "x0", 3, [1, 2])
