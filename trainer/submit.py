"""``python -m trainer submit --backend local|slurm|k8s [--dry-run]``: one run config, three launchers.

The run config's ``launch`` section (see ``trainer/configs/train.yaml``) says how many nodes and GPUs and
which ``accelerate`` config (``single``, ``ddp``, ``fsdp`` under ``trainer/configs/accelerate/``); from it:

- ``local``: the ``accelerate launch ... -m trainer.train --config ...`` command, run here;
- ``slurm``: an sbatch script (one task per node, ``srun`` starts ``accelerate launch`` on each with its
  node rank; SIGTERM two minutes before the time limit, so the run checkpoints and can be requeued);
- ``k8s``: a Job manifest (an Indexed Job plus a headless Service when there are several nodes; the pod
  index is the machine rank).

Scripts and manifests are written to ``runs/<name>/submit/`` and submitted when ``sbatch`` / ``kubectl``
exist; ``--dry-run`` prints them (and the local command) without writing or running anything.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Literal

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from trainer.config import ConfigError, TrainConfig, run_name
from trainer.launch import Launch

CONFIGS = Path(__file__).parent / "configs"
BACKENDS = ("local", "slurm", "k8s")
PORT = 29500


def accelerate_command(
    launch: Launch, config: str, overrides: list[str], rank: str = "0", master: str = "127.0.0.1"
) -> list[str]:
    cfg_file = CONFIGS / "accelerate" / f"{launch.accelerate}.yaml"
    if not cfg_file.exists():
        raise typer.BadParameter(f"no accelerate config {cfg_file}")
    try:  # relative to the repository root when run from it, so the same text works on every node
        cfg_path = str(cfg_file.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        cfg_path = str(cfg_file)
    cmd = [
        "accelerate",
        "launch",
        "--config_file",
        cfg_path,
        "--num_machines",
        str(launch.nodes),
        "--num_processes",
        str(launch.processes),
    ]
    if launch.nodes > 1:
        cmd += ["--machine_rank", rank, "--main_process_ip", master, "--main_process_port", str(PORT)]
    cmd += ["-m", "trainer.train", "--config", config]
    for o in overrides:
        cmd += ["--set", o]
    return cmd


def _q(cmd: list[str]) -> str:
    # keep $VARS expandable in scripts: quote everything except words that are exactly a variable
    return " ".join(
        a if a.startswith("$") and a[1:].replace("_", "").isalnum() else shlex.quote(a) for a in cmd
    )


# Slurm signals only the batch shell (--signal=B:TERM@120, before the time limit or on preemption): the
# trap forwards SIGTERM to srun, which passes it to the task on every node; every rank checkpoints at its
# next optimizer step and exits 143; then the job requeues itself, and the requeued job runs the same
# command, whose fixed run name resumes from that checkpoint.
PREEMPTION = [
    "on_term() {",
    '  echo "SIGTERM: checkpointing every rank, then requeueing job $SLURM_JOB_ID"',
    '  kill -TERM "$SRUN_PID" 2>/dev/null || true',
    '  wait "$SRUN_PID" || true',
    '  scontrol requeue "$SLURM_JOB_ID"',
    "  exit 0",
    "}",
    "trap on_term TERM",
]


def sbatch_script(launch: Launch, name: str, config: str, overrides: list[str], run_dir: Path) -> str:
    s = launch.slurm
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=dflash-{name}",
        f"#SBATCH --nodes={launch.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={launch.gpus_per_node}",
        f"#SBATCH --cpus-per-task={s.cpus_per_task}",
        f"#SBATCH --mem={s.mem}",
        f"#SBATCH --time={s.time}",
        f"#SBATCH --output={run_dir}/slurm-%j.out",
        "#SBATCH --signal=B:TERM@120",
        "#SBATCH --requeue",
    ]
    if s.partition:
        lines.append(f"#SBATCH --partition={s.partition}")
    if s.account:
        lines.append(f"#SBATCH --account={s.account}")
    lines += [f"#SBATCH {x}" for x in s.extra]
    cmd = accelerate_command(launch, config, overrides, rank="$SLURM_NODEID", master="$MASTER_ADDR")
    lines += [
        "set -euo pipefail",
        f"cd {shlex.quote(launch.workdir)}",
        *([launch.setup] if launch.setup else []),
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        *PREEMPTION,
        f"srun --kill-on-bad-exit=1 bash -c {shlex.quote(_q(cmd))} &",
        "SRUN_PID=$!",
        'wait "$SRUN_PID"',
    ]
    return "\n".join(lines) + "\n"


def k8s_manifest(launch: Launch, name: str, config: str, overrides: list[str]) -> str:
    k = launch.k8s
    job = f"dflash-{name}".lower().replace("_", "-")[:52]
    multi = launch.nodes > 1
    master = f"{job}-0.{job}" if multi else "127.0.0.1"
    cmd = accelerate_command(
        launch, config, overrides, rank="$JOB_COMPLETION_INDEX" if multi else "0", master=master
    )
    script = " && ".join(
        x for x in (f"cd {shlex.quote(launch.workdir)}", launch.setup, "exec " + _q(cmd)) if x
    )
    container: dict[str, Any] = {
        "name": "train",
        "image": k.image,
        "command": ["bash", "-lc", script],
        "resources": {
            "limits": {k.gpu_resource: launch.gpus_per_node, "cpu": k.cpu, "memory": k.memory},
        },
        "ports": [{"containerPort": PORT}],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": k.grace_seconds,
        "containers": [container],
    }
    if k.volume_claim:
        pod["volumes"] = [{"name": "work", "persistentVolumeClaim": {"claimName": k.volume_claim}}]
        container["volumeMounts"] = [{"name": "work", "mountPath": k.mount}]
    spec: dict[str, Any] = {
        "backoffLimit": 3,
        "completions": launch.nodes,
        "parallelism": launch.nodes,
        "template": {"metadata": {"labels": {"job": job}}, "spec": pod},
    }
    docs: list[dict[str, Any]] = []
    if multi:
        spec["completionMode"] = "Indexed"
        pod["subdomain"] = job
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": job, "namespace": k.namespace},
                "spec": {"clusterIP": "None", "selector": {"job": job}, "ports": [{"port": PORT}]},
            }
        )
    docs.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job, "namespace": k.namespace, "labels": {"app": "dflash-factory"}},
            "spec": spec,
        }
    )
    return yaml.safe_dump_all(docs, sort_keys=False)


def submit(
    config: Path,
    backend: str | None = None,
    dry_run: bool = False,
    overrides: list[str] | None = None,
    echo: Any = print,
) -> dict[str, Any]:
    cfg = TrainConfig.load(config, overrides or [])
    # launch.* only shapes the job; the training command gets the rest
    overrides = [o for o in overrides or [] if not o.strip().startswith("launch")]
    if cfg.launch.extract is not None:  # the two-part job (vLLM extraction + trainer): submit_extract.py
        raise typer.BadParameter(
            "this config has launch.extract: submit it with `python -m trainer submit-extract`"
        )
    if backend is not None and backend not in BACKENDS:
        raise typer.BadParameter(f"backend must be one of {BACKENDS}")
    launch = cfg.launch.model_copy(update={"backend": backend or cfg.launch.backend})
    name = run_name(cfg)
    if not cfg.name:  # every node (and a requeued job) must write to the same run directory
        overrides.append(f"name={name}")
    run_dir = Path(cfg.runs_dir) / name
    out_dir = run_dir / "submit"
    result: dict[str, Any] = {"backend": launch.backend, "name": name, "run_dir": str(run_dir)}
    if launch.backend == "local":
        cmd = accelerate_command(launch, str(config), overrides)
        result["command"] = _q(cmd)
        echo(result["command"])
        if not dry_run:
            result["returncode"] = subprocess.run(cmd, check=False, env=os.environ.copy()).returncode
        return result
    if launch.backend == "slurm":
        text, fname, tool, args = (
            sbatch_script(launch, name, str(config), overrides, run_dir),
            "train.sbatch",
            "sbatch",
            [],
        )
    else:
        text, fname, tool, args = (
            k8s_manifest(launch, name, str(config), overrides),
            "job.yaml",
            "kubectl",
            ["apply", "-f"],
        )
    result["text"] = text
    if dry_run:
        echo(text)
        return result
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / fname
    path.write_text(text)
    (out_dir / "submitted_at").write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
    result["path"] = str(path)
    if shutil.which(tool):
        proc = subprocess.run([tool, *args, str(path)], capture_output=True, text=True, check=False)
        result["returncode"] = proc.returncode
        echo((proc.stdout + proc.stderr).strip())
    else:
        echo(
            f"wrote {path}; `{tool}` is not installed here: submit it where it is ({tool} {' '.join(args)} {path})"
        )
    return result


class SubmitSettings(BaseModel):
    """`python -m trainer submit`: which launcher, and whether to only print (the run config is `-c`)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "slurm", "k8s"] | None = Field(
        None, description="The launcher; default: the config's launch.backend."
    )
    dry_run: bool = Field(False, description="Print the command / script / manifest; run and write nothing.")


@settings_command(SubmitSettings)
def submit_command(
    settings: SubmitSettings,
    config: Path = typer.Option(
        Path("trainer/configs/train.yaml"), "--config", "-c", help="The run config (with a `launch` section)."
    ),
    overrides: list[str] = typer.Option([], "--set", help="Override one config key: key=value."),
) -> None:
    """Launch training locally, or render + submit it as a Slurm batch job or a Kubernetes Job."""
    try:
        res = submit(config, settings.backend, settings.dry_run, overrides, echo=typer.echo)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if res.get("returncode"):
        raise typer.Exit(int(res["returncode"]))
