"""The model layer: the target model in-process — loading, chat rendering, hidden-state taps, the decoding
engine (a pluggable drafting strategy) — and, in `lm.standin`, the CPU stand-in server built on it (a server
shaped like vLLM for where vLLM cannot run, and the vLLM-style hidden-state extraction).

    from lm import load_target
    target = load_target("tiny-qwen3")          # or "smollm2", or a Hugging Face model directory
    ids = target.render(messages, tools)         # exactly the server's prompt_token_ids
    feats = target.tap(torch.tensor([ids]), target.default_layer_ids(5))   # [1, T, 5·H]

See docs/target.md.
"""

from lm.engine import (
    Autoregressive,
    DecodingStrategy,
    Engine,
    Sampler,
    SamplingParams,
    SpecDecodeStats,
    Step,
)
from lm.loading import cache_root, load_target
from lm.model import ForwardOutput, Target

__all__ = [
    "Autoregressive",
    "DecodingStrategy",
    "Engine",
    "ForwardOutput",
    "Sampler",
    "SamplingParams",
    "SpecDecodeStats",
    "Step",
    "Target",
    "cache_root",
    "load_target",
]
