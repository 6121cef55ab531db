"""FSDP2 with two processes on CPU (gloo), like the DDP test: the drafter sharded per decoder layer trains
exactly as unsharded. accelerate's FSDP launch itself needs an accelerator (on CPU it falls back to plain
DDP, MULTI_CPU), so this drives torch's `fully_shard` directly, with the wrap policy of
`trainer/configs/accelerate/fsdp.yaml`; the GPU launch path is not run here."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support import REPO_ROOT, torchrun


def test_the_fsdp_config_wraps_the_drafter_layer() -> None:
    cfg = yaml.safe_load((REPO_ROOT / "trainer/configs/accelerate/fsdp.yaml").read_text())
    assert cfg["fsdp_config"]["fsdp_version"] == 2
    assert cfg["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == "DFlashDecoderLayer"


@pytest.mark.slow
def test_fsdp2_two_processes_on_cpu_give_the_unsharded_gradients() -> None:
    proc = torchrun("tests.trainer.fsdp2_worker")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["world"] == 2
    assert result["parameter_types"] == ["DTensor"]  # every parameter sharded
    assert result["same_gradients"] is True
