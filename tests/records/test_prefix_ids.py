"""Delta storage of a session's calls: a row is stored against the earlier row of its session whose prompt ids
share the longest prefix, within a bounded window; the decoder gives back every id and every character of the
request, or says clearly that rows were read out of order."""

from __future__ import annotations

import json

import numpy as np
import pytest

from records.dataset import CallDeltaDecoder, CallDeltaEncoder, common_prefix, common_suffix_str


def ids(*parts: range) -> np.ndarray:
    return np.concatenate([np.arange(p.start, p.stop, dtype=np.int32) for p in parts])


def body(turns: int) -> str:
    """An agent request: messages grow in the middle, system prompt and tools stay at the end."""
    return json.dumps(
        {"messages": [f"turn {t} " * 20 for t in range(turns)], "system": "x" * 300, "tools": ["bash"]}
    )


def test_common_prefix_and_suffix() -> None:
    assert common_prefix(ids(range(10)), ids(range(5), range(50, 60))) == 5
    assert common_prefix(ids(range(10)), ids(range(4))) == 4
    assert common_suffix_str("abcXYZ", "abXYZ", 10) == 3


def test_a_row_is_stored_against_the_longest_shared_prefix_of_its_own_session() -> None:
    enc = CallDeltaEncoder()
    assert enc.encode("a0", "A", ids(range(100)), body(1))["delta_ref"] is None
    assert (
        enc.encode("b0", "B", ids(range(100), range(500, 520)), body(1))["delta_ref"] is None
    )  # never across sessions
    enc.encode("a1", "A", ids(range(1000, 1050)), "title call")  # a side call of session A
    out = enc.encode("a2", "A", ids(range(100), range(200, 230)), body(2))
    assert out["delta_ref"] == "a0"
    assert out["prompt_ids_prefix_len"] == 100
    assert out["prompt_ids_suffix"].tolist() == list(range(200, 230))
    assert len(out["request_json_delta"]) < 200 < len(body(2))  # only the new message, not system and tools
    assert out["request_suffix_chars"] > 300


def test_rows_round_trip_in_stored_order_and_the_window_bounds_references() -> None:
    enc, dec = CallDeltaEncoder(window=3), CallDeltaDecoder(window=3)
    rng = np.random.default_rng(0)
    history = {s: rng.integers(0, 1000, 20).astype(np.int32) for s in "ABCD"}
    for t in range(6):
        for s in "ABCD":  # four sessions interleaved, a window of three rows: the previous row fell out
            history[s] = np.concatenate([history[s], rng.integers(0, 1000, 5).astype(np.int32)])
            row = {"call_id": f"{s}{t}", **enc.encode(f"{s}{t}", s, history[s], body(t + 1))}
            assert row["delta_ref"] is None
            got_ids, got_text = dec.decode(row)
            assert got_ids.tolist() == history[s].tolist()
            assert got_text == body(t + 1)
    enc, dec = CallDeltaEncoder(window=3), CallDeltaDecoder(window=3)
    rows = [
        {"call_id": f"A{t}", **enc.encode(f"A{t}", "A", history["A"][: 10 + t], body(t + 1))}
        for t in range(5)
    ]
    rows.append({"call_id": "A5", **enc.encode("A5", "A", None, None)})  # a call without ids or body
    assert [r["delta_ref"] for r in rows] == [None, "A0", "A1", "A2", "A3", "A4"]
    for t, row in enumerate(rows[:5]):
        got_ids, got_text = dec.decode(row)
        assert got_ids.tolist() == history["A"][: 10 + t].tolist()
        assert got_text == body(t + 1)
    assert dec.decode(rows[5]) == (None, None)


def test_reading_out_of_order_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="stored order"):
        CallDeltaDecoder().decode({"call_id": "x1", "delta_ref": "x0", "prompt_ids_suffix": [1]})


def test_records_io_rebuilds_only_the_columns_asked_for(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from records import DATASET_CALLS_SCHEMA
    from records.io import read_table

    enc = CallDeltaEncoder()
    rows = []
    for t in range(3):
        row = {"call_id": f"c{t}", "session_id": "s"}
        row.update(enc.encode(f"c{t}", "s", ids(range(50 + t)), body(t + 1)))
        rows.append(row)
    pq.write_table(
        pa.Table.from_pylist(rows, schema=DATASET_CALLS_SCHEMA), tmp_path / "train-00000-of-00001.parquet"
    )
    only_ids = read_table(tmp_path, ["call_id", "prompt_token_ids"])
    assert only_ids.column_names == ["call_id", "prompt_token_ids"]
    assert only_ids.column("prompt_token_ids").to_pylist()[2] == list(range(52))
    text = read_table(tmp_path, ["request_json"])
    assert text.column_names == ["request_json"]
    assert text.column("request_json").to_pylist() == [body(1), body(2), body(3)]
