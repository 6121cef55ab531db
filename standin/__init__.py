"""The target model: loading, chat rendering, hidden-state taps, generation and the stand-in server.

    from standin import load_target
    target = load_target("tiny-qwen3")          # or "smollm2", or a Hugging Face model directory
    ids = target.render(messages, tools)         # exactly the server's prompt_token_ids
    feats = target.tap(torch.tensor([ids]), target.default_layer_ids(5))   # [1, T, 5·H]

See docs/target.md.
"""

from standin.engine import (
    Autoregressive,
    DecodingStrategy,
    Engine,
    Sampler,
    SamplingParams,
    SpecDecodeStats,
    Step,
)
from standin.loading import cache_root, load_target
from standin.model import ForwardOutput, Target

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
