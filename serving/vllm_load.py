"""Load an exported drafter with vLLM's own model class and weight loader, on any machine vLLM installs on.

Run by vLLM's interpreter (it imports vllm only, nothing of this project), as `serving.drafter_load` does:

    .venv-vllm/bin/python serving/vllm_load.py TARGET DRAFT METHOD TOKENS

Prints one JSON line: the architecture vLLM resolved, every checkpoint tensor it consumed, the drafter
parameters it left unloaded (vLLM's `load_weights` does not check: a missing tensor would stay
uninitialised memory), the ones it shares from the target, the ones it declares unused (a DFlash
`mask_embedding` without a separate mask embedding: the mask row of the shared vocabulary is used), and — when this vLLM cannot serve the method on
this machine (vLLM CPU 0.32 and DSpark) — the engine's own refusal, word for word. To get past that
refusal the load bypasses only the model-runner check; nothing is served.
"""

from __future__ import annotations

import json
import sys
import tempfile

import torch
from safetensors.torch import load_file

SHARED = ("embed_tokens", "lm_head", "draft_id_to_target_id")


def _unused(model: torch.nn.Module, name: str) -> bool:
    """A placeholder the model says it does not read: a mask embedding it masks through the vocabulary
    with (`has_separate_mask_embedding` False). Any other NaN parameter is unloaded, mask_embedding too
    when the model would read it."""
    inner = getattr(model, "model", model)
    return name.endswith("mask_embedding") and not getattr(inner, "has_separate_mask_embedding", False)


def main(target: str, draft: str, method: str, tokens: int) -> dict[str, object]:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import get_model_architecture

    spec = {"method": method, "model": draft, "num_speculative_tokens": tokens}
    args = EngineArgs(model=target, speculative_config=spec, max_model_len=1024, dtype="float32")
    refusal = None
    try:
        cfg = args.create_engine_config()
    except Exception as e:
        refusal = f"{type(e).__name__}: {e}"
        VllmConfig._validate_v1_model_runner = lambda self: None  # type: ignore[method-assign]
        cfg = args.create_engine_config()
    draft_cfg = cfg.speculative_config.draft_model_config
    model_cls, arch = get_model_architecture(draft_cfg)
    with set_current_vllm_config(cfg):
        init_distributed_environment(1, 0, f"file://{tempfile.mktemp()}", 0, "gloo")
        initialize_model_parallel(1, 1)
        model = model_cls(vllm_config=cfg)
        for p in model.parameters():
            p.data.fill_(float("nan"))  # whatever the checkpoint does not fill stays NaN
        weights = load_file(f"{draft}/model.safetensors")
        model.load_weights(iter(weights.items()))
    unloaded: list[str] = []
    shared: list[str] = []
    unused: list[str] = []
    for name, p in model.named_parameters():
        if torch.isnan(p.data.float()).all():
            if _unused(model, name):
                unused.append(name)
            else:
                (shared if any(s in name for s in SHARED) else unloaded).append(name)
    return {
        "architecture": arch,
        "method": cfg.speculative_config.method,
        "num_speculative_tokens": cfg.speculative_config.num_speculative_tokens,
        "consumed": sorted(weights),
        "unloaded": unloaded,
        "shared_from_target": shared,
        "unused": unused,
        "serve_refusal": refusal,
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))) + "\n")
