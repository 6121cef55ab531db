"""records: one CallRecord definition, a versioned schema, ids, and parts written before versioning still read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from records import (
    SCHEMA,
    SCHEMA_VERSION,
    CallRecord,
    attempt_id,
    parse_attempt_id,
    read_table,
    schema_version,
    session_prefix,
    split_session_path,
    write_part,
)
from records.io import conform

V1_PART = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "v1-proxy-part.parquet"


def test_schema_is_derived_from_the_dataclass() -> None:
    assert SCHEMA.names == [f.name for f in dataclasses.fields(CallRecord)]
    assert SCHEMA.field("prompt_token_ids").type == pa.list_(pa.int32())
    assert SCHEMA.field("request_json").type == pa.large_string()
    assert schema_version(SCHEMA) == SCHEMA_VERSION


def test_a_part_written_before_versioning_reads_as_version_1(tmp_path: Path) -> None:
    old = pq.read_schema(V1_PART)
    assert schema_version(old) == 1
    table = read_table(V1_PART)
    rows = {r["api"]: r for r in table.to_pylist()}
    chat = rows["openai_chat"]
    assert chat["prompt_token_ids"] == [1, 2, 3]
    assert chat["completion_token_ids"] == [7, 8]
    assert chat["session_id"] == "sess1-a1"
    assert rows["anthropic_messages"]["prompt_tokens"] == 5
    # and it can be rewritten with the current schema, which then says its version
    out = write_part(table.to_pylist(), tmp_path, "part.parquet")
    assert schema_version(pq.read_schema(out)) == SCHEMA_VERSION
    # the columns added since (version 3: max_tokens_capped, 4: regenerated_from) come back null
    added = {"max_tokens_capped": None, "regenerated_from": None}
    assert read_table(out).to_pylist() == [{**r, **added} for r in table.to_pylist()]


def test_a_record_round_trips_through_a_part(tmp_path: Path) -> None:
    rec = CallRecord(call_id="c1", session_id="s-a1", api="openai_chat", prompt_token_ids=[5, 6])
    path = write_part([rec.as_row()], tmp_path, "p.parquet")
    (row,) = read_table(path).to_pylist()
    assert row == rec.as_row()
    assert not list(tmp_path.glob(".*")), "no temp file is left behind"


def test_older_column_names_are_renamed() -> None:
    legacy = pa.table({"call_id": ["a"], "language": ["ko"]})
    assert conform(legacy).column_names == ["call_id", "lang"]
    both = pa.table({"call_id": ["a"], "language": ["ko"], "lang": ["en"]})
    assert conform(both).column("lang").to_pylist() == ["en"]


def test_session_prefix_and_attempt_ids() -> None:
    assert session_prefix("abc-a2") == "/s/abc-a2"
    assert split_session_path("/s/abc-a2/v1/messages") == ("abc-a2", "/v1/messages")
    assert split_session_path("/v1/messages") == (None, "/v1/messages")
    assert attempt_id("abc", 2) == "abc-a2"
    assert parse_attempt_id("abc-a2") == ("abc", 2)
    assert parse_attempt_id("abc") is None
    with pytest.raises(ValueError, match="not URL-safe"):
        session_prefix("a/b")
