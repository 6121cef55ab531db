"""`python -m trainer submit`: one config -> an accelerate command, an sbatch script, a Kubernetes Job."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trainer.cli import app
from trainer.config import ConfigError, TrainConfig
from trainer.launch import K8sOptions, SlurmOptions
from trainer.submit import submit

CONFIG = Path("trainer/configs/train.yaml")


def test_local_dry_run_prints_the_accelerate_command_and_runs_nothing(tmp_path: Path) -> None:
    res = submit(
        CONFIG, "local", dry_run=True, overrides=[f"runs_dir={tmp_path}", "name=r1"], echo=lambda _: None
    )
    cmd = res["command"]
    assert cmd.startswith("accelerate launch --config_file trainer/configs/accelerate/ddp.yaml")
    assert "--num_processes 8" in cmd
    assert "-m trainer.train --config trainer/configs/train.yaml" in cmd
    assert "--set name=r1" in cmd
    assert "returncode" not in res
    assert not (tmp_path / "r1").exists()


def test_slurm_script_for_two_nodes(tmp_path: Path) -> None:
    res = submit(
        CONFIG,
        "slurm",
        dry_run=True,
        overrides=[f"runs_dir={tmp_path}", "name=r2", "launch.nodes=2"],
        echo=lambda _: None,
    )
    text = res["text"]
    assert "#SBATCH --nodes=2" in text
    assert "#SBATCH --gpus-per-node=8" in text
    assert "#SBATCH --signal=B:TERM@120" in text
    assert "#SBATCH --requeue" in text
    assert (
        "--num_machines 2 --num_processes 16 --machine_rank $SLURM_NODEID --main_process_ip $MASTER_ADDR"
        in text
    )
    assert "launch.nodes" not in text  # launch keys shape the job, not the training command
    assert "--set name=r2" in text


def test_k8s_manifest_is_valid_yaml_with_an_indexed_job_for_several_nodes(tmp_path: Path) -> None:
    res = submit(
        CONFIG,
        "k8s",
        dry_run=True,
        overrides=[f"runs_dir={tmp_path}", "name=r3", "launch.nodes=3", "launch.accelerate=fsdp"],
        echo=lambda _: None,
    )
    docs = list(yaml.safe_load_all(res["text"]))
    service, job = docs
    assert service["kind"] == "Service"
    assert service["spec"]["clusterIP"] == "None"
    assert job["kind"] == "Job"
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    pod = job["spec"]["template"]["spec"]
    script = pod["containers"][0]["command"][-1]
    assert "accelerate/fsdp.yaml" in script
    assert "--machine_rank $JOB_COMPLETION_INDEX" in script
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "dflash-work"


def test_without_the_cluster_tool_the_script_is_written_and_not_submitted(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    res = submit(CONFIG, "slurm", overrides=[f"runs_dir={tmp_path}", "name=r4"], echo=lambda _: None)
    path = Path(res["path"])
    assert path == tmp_path / "r4" / "submit" / "train.sbatch"
    assert path.read_text() == res["text"]
    assert "returncode" not in res


def test_with_the_cluster_tool_it_submits(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/kubectl.args\necho job.batch/dflash-r5 created\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    res = submit(CONFIG, "k8s", overrides=[f"runs_dir={tmp_path}", "name=r5"], echo=lambda _: None)
    assert res["returncode"] == 0
    assert (tmp_path / "kubectl.args").read_text().split() == ["apply", "-f", res["path"]]


def test_cli_dry_run(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app,
        ["submit", "--backend", "slurm", "--dry-run", "--set", f"runs_dir={tmp_path}", "--set", "name=r6"],
    )
    assert out.exit_code == 0, out.output
    assert out.output.startswith("#!/bin/bash")


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(Exception, match="backend"):
        submit(CONFIG, "lsf", dry_run=True, echo=lambda _: None)


def test_a_misspelt_slurm_or_k8s_key_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"unknown config keys: launch\.slurm\.partiton"):
        TrainConfig.validated({"launch": {"slurm": {"partiton": "gpu"}}})
    with pytest.raises(ConfigError, match=r"config key launch\.k8s\.grace_seconds"):
        TrainConfig.validated({"launch": {"k8s": {"grace_seconds": "soon"}}})
    with pytest.raises(ConfigError, match=r"config key launch\.backend"):
        TrainConfig.validated({"launch": {"backend": "lsf"}})
    launch = TrainConfig.validated({"launch": {"slurm": {"partition": "gpu"}}}).launch
    assert launch.slurm == SlurmOptions(partition="gpu")  # the rest are the documented defaults
    assert launch.k8s == K8sOptions()
    assert launch.extract is None
