"""`submit-extract`: the two-part job renders the aux ids the vllm source checks, and the Slurm script
runs vLLM, waits for it, trains against it and stops it (driven with stand-in srun/scontrol/curl/vllm/
accelerate executables that record what they receive: the real ones need a cluster)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import typer
import yaml

from trainer.sources.numbering import check_launch
from trainer.submit import submit
from trainer.submit_extract import SubmitExtractSettings, render

AUX = "[2,10,18,26,34,36]"  # Qwen3-8B, 5 taps [1, 9, 17, 25, 33] in vLLM numbering, final layer last


def config(tmp: Path, storage: Path) -> Path:
    path = tmp / "run.yaml"
    launch = {
        "accelerate": "single",
        "gpus_per_node": 4,
        "workdir": str(Path.cwd()),
        "extract": {"model": "Qwen/Qwen3-8B", "num_target_layers": 36, "gpus": 2, "storage": str(storage)},
    }
    path.write_text(
        yaml.safe_dump(
            {"target": "Qwen/Qwen3-8B", "name": "x", "runs_dir": str(tmp / "runs"), "launch": launch}
        )
    )
    return path


def test_the_launched_aux_ids_are_the_ones_the_source_checks(tmp_path: Path) -> None:
    text, where = render(SubmitExtractSettings(config=config(tmp_path, tmp_path / "hs"), backend="slurm"))
    assert where == tmp_path / "runs" / "x" / "submit" / "train-extract.sbatch"
    assert f'"eagle_aux_hidden_state_layer_ids":{AUX}' in text
    assert "vllm.launched_aux_layer_ids=[2, 10, 18, 26, 34, 36]" in text
    assert "#SBATCH hetjob" in text
    check_launch([1, 9, 17, 25, 33], [2, 10, 18, 26, 34, 36], 36)  # what the trainer will verify


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_slurm_script_serves_waits_trains_and_stops_the_server(tmp_path: Path) -> None:
    text, _ = render(SubmitExtractSettings(config=config(tmp_path, tmp_path / "hs"), backend="slurm"))
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    _stub(bin_dir, "srun", 'while [[ "$1" == --* ]]; do shift; done; exec "$@"')
    _stub(bin_dir, "scontrol", "echo gpu-node-7")
    # healthy only once the server has started, as a real /health is
    _stub(bin_dir, "curl", f'until grep -qs "^vllm" {log}; do sleep 0.05; done; echo "curl $*" >> {log}')
    _stub(bin_dir, "vllm", f'echo "vllm $*" >> {log}; exec sleep 60')
    _stub(bin_dir, "accelerate", f'echo "accelerate $*" >> {log}; exit 3')
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NODEID": "0"}
    env |= {"SLURM_JOB_NODELIST_HET_GROUP_0": "gpu-node-7", "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu-node-8"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr  # training's status is the job's
    lines = log.read_text().splitlines()
    serve = [x for x in lines if x.startswith("vllm serve Qwen/Qwen3-8B")]
    assert len(serve) == 1
    assert "--tensor-parallel-size 2" in serve[0]
    assert any(x.startswith("curl -sf http://gpu-node-7:8000/health") for x in lines)
    train = [x for x in lines if x.startswith("accelerate")]
    assert len(train) == 1
    assert "vllm.url=http://gpu-node-7:8000" in train[0]
    assert "feature_source=vllm" in train[0]
    assert (tmp_path / "hs").is_dir()


def test_the_kubernetes_job_shares_a_volume_between_vllm_and_the_trainer(tmp_path: Path) -> None:
    text, _ = render(SubmitExtractSettings(config=config(tmp_path, Path("/hs")), backend="k8s"))
    job = yaml.safe_load(text)
    vllm, train = job["spec"]["template"]["spec"]["containers"]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert train["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert vllm["volumeMounts"] == train["volumeMounts"] == [{"name": "hidden-states", "mountPath": "/hs"}]
    assert f'"eagle_aux_hidden_state_layer_ids":{AUX}' in vllm["command"][-1]
    script = train["command"][-1]
    assert script.index("until curl -sf http://127.0.0.1:8000/health") < script.index("accelerate launch")
    assert "vllm.url=http://127.0.0.1:8000" in script


def test_plain_submit_refuses_a_two_part_config(tmp_path: Path) -> None:
    with pytest.raises(typer.BadParameter, match="submit-extract"):
        submit(config(tmp_path, tmp_path / "hs"), backend="slurm", dry_run=True)
