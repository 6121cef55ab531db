"""`python -m trainer submit-extract`: the two-part job — vLLM with extraction on some GPUs, the trainer
(`feature_source: vllm`) on others, sharing a directory for the hidden-state files — as ONE job.

- Slurm: a heterogeneous job; component 0 runs `vllm serve` on its GPUs, component 1 waits for its
  `/health` and runs the same `accelerate launch -m trainer.train` that `submit` renders, pointed at it.
  When training ends the server is stopped and the job ends with training's exit status.
- Kubernetes: one Job whose pod holds two containers — `vllm` and `train` — and a shared volume (a
  PersistentVolumeClaim, else an emptyDir) mounted at the storage path; the trainer reaches vLLM on
  localhost. One trainer node (more nodes: use Slurm, or a cluster-wide shared volume and `submit`).

The aux ids the server is launched with come from `trainer.sources.numbering.to_vllm` — the same
function the vllm source checks the server against — so the two parts cannot disagree.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field

from clikit import settings_command
from lm.taps import default_target_layer_ids
from trainer.config import TrainConfig, run_name
from trainer.launch import ExtractLaunch, Launch
from trainer.sources.numbering import to_vllm
from trainer.submit import accelerate_command


def aux_ids(cfg: TrainConfig, ext: ExtractLaunch) -> list[int]:
    taps = cfg.target_layer_ids or default_target_layer_ids(ext.num_target_layers, cfg.num_layers)
    return to_vllm(taps, ext.num_target_layers)


def vllm_command(cfg: TrainConfig, ext: ExtractLaunch) -> list[str]:
    spec = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": aux_ids(cfg, ext)}},
    }
    kv = {
        "kv_connector": "ExampleHiddenStatesConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": ext.storage},
    }
    return [
        "vllm",
        "serve",
        ext.model,
        "--host",
        "0.0.0.0",
        "--port",
        str(ext.port),
        "--tensor-parallel-size",
        str(ext.gpus),
        "--no-enable-chunked-prefill",
        "--speculative-config",
        json.dumps(spec, separators=(",", ":")),
        "--kv-transfer-config",
        json.dumps(kv, separators=(",", ":")),
        *ext.extra_args,
    ]


def source_overrides(cfg: TrainConfig, ext: ExtractLaunch, host: str) -> list[str]:
    return [
        "feature_source=vllm",
        f"vllm.url=http://{host}:{ext.port}",
        f"vllm.launched_aux_layer_ids={aux_ids(cfg, ext)}",
        f"vllm.model={ext.model}",
    ]


def _word(a: str) -> str:
    # $NAME inside an argument (the vLLM host, the node rank) is expanded by the shell that runs it
    if "$" in a and not any(c in a for c in "\"\\`'"):
        return f'"{a}"'
    return shlex.quote(a)


def _sh(cmd: list[str]) -> str:
    return " ".join(_word(a) for a in cmd)


def _wait(url: str) -> str:
    return f"until curl -sf {url}/health >/dev/null; do sleep 10; done"


def sbatch_script(
    cfg: TrainConfig, launch: Launch, ext: ExtractLaunch, config: str, overrides: list[str]
) -> str:
    s = launch.slurm
    name = run_name(cfg)
    run_dir = Path(cfg.runs_dir) / name
    common = [f"#SBATCH --time={s.time}"] + [
        f"#SBATCH --{k}={getattr(s, k)}" for k in ("partition", "account") if getattr(s, k)
    ]
    train = accelerate_command(
        launch,
        config,
        [*overrides, *source_overrides(cfg, ext, "$VLLM_HOST")],
        "$SLURM_NODEID",
        "$MASTER_ADDR",
    )
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=dflash-{name}",
        f"#SBATCH --output={run_dir}/slurm-%j.out",
        *common,
        "#SBATCH --nodes=1 --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={ext.gpus} --cpus-per-task={s.cpus_per_task}",
        "#SBATCH hetjob",
        *common,
        f"#SBATCH --nodes={launch.nodes} --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={launch.gpus_per_node} --cpus-per-task={s.cpus_per_task}",
        "set -euo pipefail",
        f"cd {shlex.quote(launch.workdir)}",
        f"mkdir -p {shlex.quote(ext.storage)}",
        'export VLLM_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0" | head -n 1)',
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_1" | head -n 1)',
        "# part 1: the target inside vLLM, extracting the drafter's taps (vLLM numbering: tap k -> k+1, final layer last)",
        f"srun --het-group=0 bash -c {shlex.quote(' && '.join(x for x in (ext.setup, 'exec ' + _sh(vllm_command(cfg, ext))) if x))} &",
        "VLLM_PID=$!",
        f"{_wait(f'http://$VLLM_HOST:{ext.port}')}",
        "# part 2: the trainer, fed by the vllm feature source; files go through the shared storage",
        "STATUS=0",
        f"srun --het-group=1 --kill-on-bad-exit=1 bash -c {shlex.quote(' && '.join(x for x in (launch.setup, _sh(train)) if x))} || STATUS=$?",
        "kill $VLLM_PID 2>/dev/null || true",
        "exit $STATUS",
    ]
    return "\n".join(lines) + "\n"


def k8s_manifest(
    cfg: TrainConfig, launch: Launch, ext: ExtractLaunch, config: str, overrides: list[str]
) -> str:
    if launch.nodes > 1:
        raise typer.BadParameter("submit-extract on Kubernetes runs one trainer node: set launch.nodes=1")
    k = launch.k8s
    job = f"dflash-{run_name(cfg)}".lower().replace("_", "-")[:52]
    train = accelerate_command(launch, config, [*overrides, *source_overrides(cfg, ext, "127.0.0.1")])
    script = " && ".join(
        x
        for x in (
            f"cd {shlex.quote(launch.workdir)}",
            launch.setup,
            _wait(f"http://127.0.0.1:{ext.port}"),
            "exec " + _sh(train),
        )
        if x
    )
    claim = k.volume_claim
    volume = {
        "name": "hidden-states",
        **({"persistentVolumeClaim": {"claimName": claim}} if claim else {"emptyDir": {}}),
    }
    mount = [{"name": "hidden-states", "mountPath": ext.storage}]
    vllm = {
        "name": "vllm",
        "image": ext.image,
        "command": [
            "bash",
            "-lc",
            " && ".join(x for x in (ext.setup, "exec " + _sh(vllm_command(cfg, ext))) if x),
        ],
        "resources": {"limits": {k.gpu_resource: ext.gpus}},
        "volumeMounts": mount,
        "readinessProbe": {"httpGet": {"path": "/health", "port": ext.port}, "periodSeconds": 10},
    }
    trainer = {
        "name": "train",
        "image": k.image,
        "command": ["bash", "-lc", script],
        "resources": {"limits": {k.gpu_resource: launch.gpus_per_node}},
        "volumeMounts": mount,
    }
    pod = {"restartPolicy": "Never", "containers": [vllm, trainer], "volumes": [volume]}
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job, "namespace": k.namespace, "labels": {"app": "dflash-factory"}},
        # the vllm container never exits on its own: the Job ends when training does (podReplacementPolicy aside)
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"job": job}}, "spec": pod}},
    }
    return yaml.safe_dump(manifest, sort_keys=False)


class SubmitExtractSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: Path = Field(..., description="The run config, with launch.extract (see docs/trainer.md).")
    backend: str = Field("slurm", description="slurm or k8s.")
    dry_run: bool = Field(False, description="Print the script / manifest; write and submit nothing.")
    overrides: list[str] = Field(default_factory=list, description="key=value overrides of the run config.")


def render(settings: SubmitExtractSettings) -> tuple[str, Path]:
    """The script or manifest, and where it goes (the run's submit/ directory)."""
    cfg = TrainConfig.load(settings.config, settings.overrides)
    overrides = [o for o in settings.overrides if not o.strip().startswith("launch")]
    if not cfg.name:  # both parts, and a requeued job, must name the same run
        cfg.name = run_name(cfg)
        overrides.append(f"name={cfg.name}")
    out = Path(cfg.runs_dir) / cfg.name / "submit"
    launch = cfg.launch
    ext = launch.extract
    if ext is None:
        raise typer.BadParameter(f"{settings.config}: no launch.extract section (the vLLM half of the job)")
    if settings.backend == "slurm":
        return sbatch_script(cfg, launch, ext, str(settings.config), overrides), out / "train-extract.sbatch"
    if settings.backend == "k8s":
        return k8s_manifest(cfg, launch, ext, str(settings.config), overrides), out / "job-extract.yaml"
    raise typer.BadParameter("backend must be slurm or k8s")


@settings_command(SubmitExtractSettings)
def submit_extract_command(settings: SubmitExtractSettings) -> None:
    """Render (and submit) the two-part job: vLLM extracting hidden states + the trainer reading them."""
    text, fname = render(settings)
    if settings.dry_run:
        typer.echo(text)
        return
    cfg = TrainConfig.load(settings.config, settings.overrides)
    out = Path(cfg.runs_dir) / run_name(cfg) / "submit"
    out.mkdir(parents=True, exist_ok=True)
    (out / fname).write_text(text)
    tool, args = ("sbatch", []) if settings.backend == "slurm" else ("kubectl", ["apply", "-f"])
    if shutil.which(tool) is None:
        typer.echo(
            f"wrote {out / fname}; `{tool}` is not installed here: run `{tool} {' '.join(args)} {out / fname}` where it is"
        )
        return
    proc = subprocess.run([tool, *args, str(out / fname)], capture_output=True, text=True, check=False)
    typer.echo((proc.stdout + proc.stderr).strip())
    if proc.returncode:
        raise typer.Exit(proc.returncode)
