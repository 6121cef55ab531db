"""The `sessions` config's test-outcome columns from a session row (issue 14): what the sandbox stored as
test_baseline / test_after / resolved / environment becomes flat columns of SESSIONS_SCHEMA."""

from __future__ import annotations

import pyarrow as pa

from factory.db import Session
from factory.publish.sessions import test_columns as columns_of
from records import SESSIONS_SCHEMA


def test_columns_of_a_resolved_session_fit_the_schema() -> None:
    run = {"command": "python -m pytest -rA", "exit_code": 1, "passed": 1, "failed": 1, "errors": 0}
    sess = Session(
        test_baseline={**run, "timed_out": False, "tail": "FAILED t::a"},
        test_after={**run, "exit_code": 0, "passed": 2, "failed": 0, "timed_out": False, "tail": "2 passed"},
        resolved=True,
        environment={"setup": {"status": "built", "image": "dflash-sandbox-env:x"}, "egress": []},
    )
    cols = columns_of(sess)
    assert cols == {
        "resolved": True,
        "test_command": "python -m pytest -rA",
        "baseline_passed": 1,
        "baseline_failed": 1,
        "baseline_errors": 0,
        "baseline_timed_out": False,
        "baseline_exit_code": 1,
        "baseline_tail": "FAILED t::a",
        "after_passed": 2,
        "after_failed": 0,
        "after_errors": 0,
        "after_timed_out": False,
        "after_exit_code": 0,
        "after_tail": "2 passed",
        "setup_status": "built",
    }
    names = set(SESSIONS_SCHEMA.names)
    assert set(cols) <= names
    table = pa.Table.from_pylist([cols], schema=pa.schema([SESSIONS_SCHEMA.field(n) for n in cols]))
    assert table.column("resolved").to_pylist() == [True]


def test_a_session_without_tests_has_null_columns() -> None:
    cols = columns_of(Session())
    assert cols["resolved"] is None
    assert cols["test_command"] is None
    assert cols["setup_status"] is None
    assert all(v is None for k, v in cols.items() if k.startswith(("baseline_", "after_")))
