"""Fixtures every test package shares, built once per run: the Docker engine and the agents image; the
models (tiny-qwen3, SmolLM2), tiny-qwen3's call records and the drafter overfit on them."""

from __future__ import annotations

import os
from pathlib import Path

# The HF Hub cannot be reached from this machine or CI: offline, a lookup of a name that is not cached fails
# at once instead of waiting out DNS and retries (28 s for one unknown target). Set before anything imports
# huggingface_hub, which reads it once; subprocesses inherit it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest

from lm import Target, load_target
from tests.support.tiny import call_rows, overfit


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any failure to reach the engine
        if os.environ.get("CI"):
            pytest.fail(f"no Docker engine in CI (make docker starts one): {exc}")
        pytest.skip(f"no Docker engine answers (run `make docker`): {exc}")
    return client


@pytest.fixture(scope="session")
def agents_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    from sandboxes.config import SandboxSettings
    from sandboxes.images.build import build_agents

    return build_agents(docker_client, SandboxSettings(), log=lambda _: None)


@pytest.fixture(scope="session")
def tiny() -> Target:
    """tiny-qwen3: the real Qwen3 architecture and tokenizer, tiny random weights."""
    return load_target("tiny-qwen3")


@pytest.fixture(scope="session")
def smollm2() -> Target:
    # The real cache (DFLASH_CACHE or ~/.cache/dflash-factory): the GGUF is converted once per machine.
    return load_target("smollm2")


@pytest.fixture(scope="session")
def tiny_rows(tiny: Target) -> list[dict]:  # type: ignore[type-arg]
    return call_rows(tiny, [20, 24, 28, 32])


@pytest.fixture(scope="session")
def tiny_drafter(tiny: Target, tiny_rows: list[dict], tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[type-arg]
    """A drafter overfit on the target's own greedy continuations: high acceptance, on both engines."""
    # 80 steps: at 40 the acceptance length was 2.14 on one install and 1.77 on another (torch 2.13 CPU,
    # transformers 5.24), too near the vLLM gate test's 1.8 floor; at 80 it is 4.0 on both engines.
    return overfit(tiny, tiny_rows, tmp_path_factory.mktemp("drafter"), steps=80)
