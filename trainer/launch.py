"""The run config's ``launch`` section: how `python -m trainer submit` and `submit-extract` start a run
(backend, accelerate config, nodes and GPUs, Slurm and Kubernetes resources, the vLLM half of a two-part
job). Training itself never reads it. Every key is typed here once; a misspelt one is refused by name
(``config key launch.slurm.partiton``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SlurmOptions(BaseModel):
    """`launch.slurm`: the batch job's resources (both `submit` and `submit-extract` read these)."""

    model_config = ConfigDict(extra="forbid")
    partition: str | None = None
    time: str = "24:00:00"
    account: str | None = None
    cpus_per_task: int = 16
    mem: str = "0"
    extra: list[str] = Field(default_factory=list, description="More #SBATCH lines, e.g. --qos=high.")


class K8sOptions(BaseModel):
    """`launch.k8s`: the Job's image, namespace and resources."""

    model_config = ConfigDict(extra="forbid")
    image: str = "dflash-factory:latest"
    namespace: str = "default"
    gpu_resource: str = "nvidia.com/gpu"
    cpu: str = "16"
    memory: str = "128Gi"
    volume_claim: str | None = None
    mount: str = "/workspace"
    grace_seconds: int = 300


class ExtractLaunch(BaseModel):
    """The run config's `launch.extract` section: the vLLM half of the job."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(..., description="What vLLM serves: the target's Hugging Face id or path.")
    num_target_layers: int = Field(..., ge=2, description="The target's decoder layers (its config.json).")
    gpus: int = Field(1, ge=1, description="GPUs of the vLLM server (its tensor parallel size).")
    port: int = Field(8000, description="The server's port.")
    storage: str = Field(..., description="The shared directory for hidden-state files (same path on both).")
    image: str = Field("vllm/vllm-openai:latest", description="Kubernetes: the vLLM container image.")
    setup: str = Field("", description="Shell run before `vllm serve` (e.g. activating vLLM's environment).")
    extra_args: list[str] = Field(default_factory=list, description="More `vllm serve` arguments.")


class Launch(BaseModel):
    """`launch`: where and how the run starts."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "slurm", "k8s"] = Field("local", description="local | slurm | k8s.")
    accelerate: Literal["single", "ddp", "fsdp"] = Field(
        "single", description="The accelerate config (trainer/configs/accelerate/*.yaml)."
    )
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(1, ge=1)
    workdir: str = Field(".", description="Where the repository lives on the nodes.")
    setup: str | None = Field(
        "", description="Shell run before launching (e.g. `source .venv/bin/activate`); empty: none."
    )
    slurm: SlurmOptions = Field(default_factory=SlurmOptions)
    k8s: K8sOptions = Field(default_factory=K8sOptions)
    extract: ExtractLaunch | None = Field(
        None, description="The vLLM half of a two-part job (submit-extract)."
    )

    @property
    def processes(self) -> int:
        return self.nodes * self.gpus_per_node
