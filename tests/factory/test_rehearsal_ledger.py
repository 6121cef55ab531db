"""The rehearsal's ledger tells a session done twice from one whose first end died with a runner killed -9
before it was stored (it had to run again), from the agents' own logs (one file per runner pid)."""

from __future__ import annotations

import json
from pathlib import Path

from factory.db import connect, session_factory
from factory.rehearse.accounting import count


def ack_logs(folder: Path, ends: dict[int, list[str]]) -> None:
    """Each runner pid's log: the sessions whose agents ran to their end there."""
    folder.mkdir(parents=True)
    for pid, ids in ends.items():
        lines = [json.dumps({"session": f"{s}-a1", "finished": s, "attempt": 1, "turns": 3}) for s in ids]
        (folder / f"{pid}.jsonl").write_text("\n".join(lines) + "\n")


def test_an_end_lost_with_a_killed_runner_is_redone_not_done_twice(tmp_path: Path) -> None:
    report = tmp_path / "report"
    # "a": ended on 111 (then killed -9) and again on 222; "b": ended on 222 and on 333, both alive
    ack_logs(report / "acks", {111: ["a"], 222: ["a", "b"], 333: ["b", "c"]})
    sessions = session_factory(connect(f"sqlite:///{tmp_path / 'q.db'}"))
    ledger = count(tmp_path / "data", report, sessions, killed=frozenset({111}))
    assert ledger.sessions_finished == 5
    assert ledger.redone_after_kill == 1
    assert (ledger.completed_twice, ledger.completed_twice_ids) == (1, ["b"])
    # nothing killed: both are done twice
    assert count(tmp_path / "data", report, sessions).completed_twice_ids == ["a", "b"]
