"""Run ledgers and the data-folder lock, without Docker: a dead run's recorded processes are stopped (by
pid and start time), a live run's never; a second live run on a folder is refused; the lock dies with
its holder however it dies."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from factory.cli import app
from factory.run.ledger import DataDirBusy, DataDirLock, Ledger, ProcessEntry, process_alive, read_ledgers
from factory.run.reap import reap_data_dir
from sandboxes.labels import process_start_time

ROOT = Path(__file__).resolve().parents[2]

# A run in a process of its own: holds the lock, records one service (a `sleep` in its own session,
# with no parent-death signal, as a wedged service would be), says so, then waits to be killed.
RUN = """
import subprocess, sys, time
from pathlib import Path
from factory.run.ledger import DataDirLock, Ledger
data = Path(sys.argv[1])
lock = DataDirLock(data).acquire() if sys.argv[2] == "lock" else None
ledger = Ledger(data, "run-" + sys.argv[3])
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
ledger.add_process("service", child.pid)
print(child.pid, flush=True)
time.sleep(300)
"""


def start_run(data: Path, name: str, lock: bool = True) -> tuple[subprocess.Popen[str], int]:
    p = subprocess.Popen(
        [sys.executable, "-c", RUN, str(data), "lock" if lock else "-", name],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert p.stdout is not None
    return p, int(p.stdout.readline())


def kill9(p: subprocess.Popen[str]) -> None:
    p.send_signal(signal.SIGKILL)
    p.wait(10)


def test_dead_runs_processes_are_reaped_live_ones_are_not(tmp_path):
    data = tmp_path / "data"
    dead, dead_child = start_run(data, "dead", lock=False)
    live, live_child = start_run(data, "live", lock=False)
    try:
        kill9(dead)
        entry = ProcessEntry(name="service", pid=dead_child, start=process_start_time(dead_child))
        assert process_alive(entry)  # the dead run's service outlived it

        preview = reap_data_dir(data, dry_run=True)
        assert preview.processes == [f"service (pid {dead_child})"]
        assert process_alive(entry)  # a dry run touches nothing

        report = reap_data_dir(data)
        assert report.processes == [f"service (pid {dead_child})"]
        assert report.ledgers == ["run-dead"]
        assert not process_alive(entry)
        assert [rec.run_id for _, rec in read_ledgers(data)] == ["run-live"]
        assert process_start_time(live_child) is not None  # the live run's service is untouched
        assert reap_data_dir(data).empty()
    finally:
        kill9(live)
        os.kill(live_child, signal.SIGKILL)


def test_a_reused_pid_is_not_the_recorded_process(tmp_path):
    # Same pid, other start time: what runs under that pid now is not what the dead run started.
    entry = ProcessEntry(name="service", pid=os.getpid(), start="1")
    assert not process_alive(entry)


def test_second_run_on_a_folder_is_refused_until_the_first_dies(tmp_path):
    data = tmp_path / "data"
    first, child = start_run(data, "first")
    try:
        with pytest.raises(DataDirBusy) as ei:
            DataDirLock(data).acquire()
        assert f"pid {first.pid}" in str(ei.value)
        assert str(data) in str(ei.value)
        DataDirLock(tmp_path / "other").acquire().release()  # another folder is free
        kill9(first)  # kill -9: no cleanup ran, yet the kernel dropped the lock
        with DataDirLock(data):
            pass
    finally:
        os.kill(child, signal.SIGKILL)


def test_ledger_is_rewritten_on_change_and_removed_on_a_clean_end(tmp_path):
    ledger = Ledger(tmp_path, "run-x", sandboxes=True)
    ledger.add_process("proxy", os.getpid())
    ledger.set_spool(tmp_path / "spool")
    rec = json.loads((tmp_path / "runs" / "run-x.json").read_text())
    assert rec["sandboxes"] is True
    assert rec["processes"][0]["pid"] == os.getpid()
    assert rec["processes"][0]["start"] == process_start_time(os.getpid())
    assert rec["spool_dir"] == str(tmp_path / "spool")
    assert reap_data_dir(tmp_path).empty()  # its owner (this process) is alive
    ledger.close()
    assert read_ledgers(tmp_path) == []


def test_a_half_written_ledger_is_skipped(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "torn.json").write_text('{"run_id": "x", "own')
    assert read_ledgers(tmp_path) == []


@pytest.mark.docker
def test_reap_command_reaps_a_data_folder_and_says_what_it_removed(tmp_path, docker_client):
    def reap(*args: str) -> str:
        result = CliRunner().invoke(app, ["reap", "--data-dir", str(data), *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    data = tmp_path / "data"
    dead, child = start_run(data, "dead", lock=False)
    try:
        kill9(dead)
        assert f"would stop service (pid {child})" in reap("--dry-run")
        assert process_start_time(child) is not None
        out = reap().splitlines()
        assert f"stopped service (pid {child})" in out
        assert "dead run run-dead: ledger closed" in out
        assert process_start_time(child) is None  # gone, and reaped by init
        assert reap().strip() == "nothing left by dead runs"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_without_an_engine_a_dead_runs_sandboxes_wait_for_a_later_reap(tmp_path):
    dead, child = start_run(tmp_path, "dead", lock=False)
    kill9(dead)
    path = tmp_path / "runs" / "run-dead.json"
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, "sandboxes": True}))

    def no_engine():  # type: ignore[no-untyped-def]
        raise RuntimeError("no Docker engine answers: connection refused")

    report = reap_data_dir(tmp_path, no_engine)
    assert report.processes == [f"service (pid {child})"]  # its services are stopped all the same
    assert report.ledgers == []
    assert report.notes == [
        "dead run run-dead: sandboxes not reaped: no Docker engine answers: connection refused"
    ]
    assert path.exists()  # kept: the next reap with an engine removes its sandboxes
