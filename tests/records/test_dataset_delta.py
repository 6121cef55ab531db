"""The previous published layout (each `calls` row a delta against an earlier row of its session) keeps
loading: tests/fixtures/dataset_delta is an export written by that code (2026-12-03, two sessions
of four turns), `expected.json` the sha256 of every call's prompt ids and request as the proxy recorded them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from records.dataset import common_prefix, common_prefix_str, common_suffix_str
from records.dataset_delta import CallDeltaDecoder
from records.io import read_table

FIXTURE = Path(__file__).parents[1] / "fixtures" / "dataset_delta"


def _sha(value: object) -> str:
    return hashlib.sha256(
        value.encode() if isinstance(value, str) else json.dumps(value).encode()
    ).hexdigest()


def test_common_prefix_and_suffix() -> None:
    assert common_prefix(np.array([1, 2, 3]), np.array([1, 2, 4, 5])) == 2
    assert common_prefix(np.array([1, 2]), np.array([1, 2, 3])) == 2
    assert common_prefix_str("abcdef", "abcxyz") == 3
    assert common_suffix_str("xx-tail", "yyy-tail", limit=100) == 5
    assert common_suffix_str("xx-tail", "yyy-tail", limit=2) == 2


def test_the_previous_layout_reads_back_every_call_whole() -> None:
    expected = json.loads((FIXTURE / "expected.json").read_text())
    table = read_table(FIXTURE / "data" / "calls")
    assert "delta_ref" not in table.column_names  # the helper columns are gone once rebuilt
    got = {r["call_id"]: r for r in table.to_pylist()}
    assert set(got) == set(expected)
    assert len(got) == 8
    for call_id, want in expected.items():
        assert _sha(got[call_id]["prompt_token_ids"]) == want["prompt_token_ids"], call_id
        assert _sha(got[call_id]["request_json"]) == want["request_json"], call_id
    stored = read_table(FIXTURE / "data" / "calls", ["call_id", "delta_ref"]).column("delta_ref").to_pylist()
    assert sum(r is not None for r in stored) == 6  # all but each session's first call were deltas


def test_only_the_columns_asked_for_come_back() -> None:
    only_ids = read_table(FIXTURE, ["call_id", "prompt_token_ids"])
    assert only_ids.column_names == ["call_id", "prompt_token_ids"]
    assert read_table(FIXTURE, ["request_json"]).column_names == ["request_json"]


def test_reading_out_of_order_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="stored order"):
        CallDeltaDecoder().decode({"call_id": "x1", "delta_ref": "x0", "prompt_ids_suffix": [1]})
