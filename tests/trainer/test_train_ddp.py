"""Two processes (DDP over gloo on CPU, started by torchrun as `accelerate launch` does): one run directory, shared sequences,
synchronised steps, one drafter at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT, free_port
from tests.trainer.dflash.tiny import MASK, save_tiny, tiny_target, write_calls


@pytest.mark.slow
def test_ddp_two_processes_on_cpu(tmp_path: Path) -> None:
    target = tiny_target(layers=4)
    model_dir = save_tiny(tmp_path / "tiny", target)
    calls = write_calls(target, tmp_path / "calls.parquet", sessions=5, calls=2, new_tokens=12)
    args = [
        f"target={model_dir}",
        f"data={calls}",
        f"runs_dir={tmp_path / 'runs'}",
        "num_layers=1",
        "block_size=4",
        f"mask_token_id={MASK}",
        "max_len=256",
        "eval_fraction=0.3",
        "epochs=2",
        "anchors=16",
    ]
    # torchrun is what `accelerate launch` runs for multi-process jobs; on CPU Accelerator picks gloo
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
    ]
    cmd += ["-m", "trainer.train"]
    for a in args:
        cmd += ["--set", a]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [p for p in (tmp_path / "runs").iterdir() if p.name != "latest"]
    assert len(runs) == 1  # both ranks agreed on one run directory
    run = runs[0]
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["world_size"] == 2
    # 4 training sequences, 2 ranks: 2 steps per epoch, 2 epochs
    assert summary["steps"] == 4
    assert (run / "drafter" / "model.safetensors").exists()
    assert "WORLD_SIZE" in (run / "command.txt").read_text()
