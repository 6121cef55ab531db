"""Two processes (DDP over gloo on CPU, started by torchrun as `accelerate launch` does): one run directory, shared sequences,
synchronised steps, one drafter at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import torchrun
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
        "activation_checkpointing=true",  # recomputed layers under DDP's gradient hooks
    ]
    torchrun("trainer.train", *(x for a in args for x in ("--set", a)))
    runs = [p for p in (tmp_path / "runs").iterdir() if p.name != "latest"]
    assert len(runs) == 1  # both ranks agreed on one run directory
    run = runs[0]
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["world_size"] == 2
    # 4 training sequences, 2 ranks: 2 steps per epoch, 2 epochs
    assert summary["steps"] == 4
    assert (run / "drafter" / "model.safetensors").exists()
    assert "WORLD_SIZE" in (run / "command.txt").read_text()
