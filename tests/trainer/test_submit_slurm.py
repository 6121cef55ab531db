"""Slurm preemption, end to end through the generated batch script, with stand-in `srun`, `scontrol` and
`accelerate` executables (no Slurm here) that record what they receive: SIGTERM reaches the training
task, which checkpoints, and the job requeues itself with the same run name."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from pathlib import Path

from trainer.submit import submit

CONFIG = Path("trainer/configs/train.yaml")

SRUN = """#!/bin/bash
echo "$@" >> "$LOG/srun.args"
while [[ "$1" == --* ]]; do shift; done
"$@" &
child=$!
trap 'echo TERM >> "$LOG/srun.signals"; kill -TERM $child' TERM
wait $child; rc=$?
if kill -0 $child 2>/dev/null; then wait $child; rc=$?; fi
exit $rc
"""
SCONTROL = """#!/bin/bash
echo "$@" >> "$LOG/scontrol.args"
if [[ "$1" == show ]]; then echo node1; fi
"""
# what the training command does on SIGTERM (tests/trainer/test_train.py shows the real one does it)
ACCELERATE = """#!/bin/bash
echo "$@" > "$LOG/accelerate.args"
trap 'echo checkpointed >> "$LOG/train.log"; exit 143' TERM
echo started >> "$LOG/train.log"
while true; do sleep 0.1; done
"""


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_sigterm_reaches_the_ranks_which_checkpoint_and_the_job_requeues(tmp_path: Path) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    log.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("accelerate", ACCELERATE)):
        _exe(bin_dir / name, text)
    res = submit(
        CONFIG,
        "slurm",
        dry_run=True,
        overrides=[f"runs_dir={tmp_path}", "name=r7", f"launch.workdir={tmp_path}", "launch.setup="],
        echo=lambda _: None,
    )
    script = tmp_path / "train.sbatch"
    script.write_text(res["text"])
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "LOG": str(log),
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_NODEID": "0",
    }
    job = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not (log / "train.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (log / "train.log").exists(), "the training task never started"
    job.send_signal(signal.SIGTERM)  # what --signal=B:TERM@120 delivers to the batch shell
    out, _ = job.communicate(timeout=30)
    assert job.returncode == 0, out
    assert (log / "srun.signals").read_text().split() == ["TERM"]  # forwarded to the step
    assert (log / "train.log").read_text().split() == ["started", "checkpointed"]  # the rank saw it
    assert "requeue 42" in (log / "scontrol.args").read_text().splitlines()
    args = (log / "accelerate.args").read_text()
    assert "--set name=r7" in args  # the requeued job runs the same command: the same run resumes
    assert "--kill-on-bad-exit=1" in (log / "srun.args").read_text()
