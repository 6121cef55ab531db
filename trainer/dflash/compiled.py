"""Flex attention and its block masks, compiled where they are trained (CUDA), with dynamic shapes.

Every training step has another context length and anchor count. Compiled per shape, a run would
recompile all along and, once dynamo's recompile limit is hit, silently fall back to eager flex attention,
which materialises the whole score matrix. So both are compiled with ``dynamic=True`` and the masks keep
their lengths in tensors (``helpers.block_mask_mod``, ``layout.mask_mod``; dynamo guards on a Python
int's value): a run builds a handful of graphs (the first shape static, then dynamic ones), and hitting
the limit anyway raises instead of falling back (tests/trainer/dflash/test_compile_bounded.py).

Compiled, ``create_block_mask`` fuses the mask function into its block reduction, so a step's mask never
materialises its queries × keys as a boolean tensor (eager: ~16 bytes per pair, gigabytes at 32k × 48k).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

COMPILE_ON = {"cuda"}  # device types compiled for (tests add "cpu": flex attention's forward only)
BACKEND = "inductor"  # torch.compile's backend (tests count dynamo's graphs with "eager" on a CPU)
RECOMPILE_LIMIT = 64  # graphs per compiled function; a run builds about a dozen
_COMPILED: dict[tuple[str, str], Callable[..., Any]] = {}


def _compiled(name: str, fn: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
    if device.type not in COMPILE_ON:
        return fn
    key = (name, device.type)
    if key not in _COMPILED:
        compiled = torch.compile(fn, dynamic=True, backend=BACKEND)

        def strict(*args: Any, **kwargs: Any) -> Any:
            # for these calls only (not every compiled function of the process): the recompile limit
            # raises instead of silently running eagerly, and is sized to the variants a run really
            # has (grad and no-grad for the held-out evaluation, one to several segments, a single
            # query block: dynamo specialises a size of 1), not to dynamo's default of 8, which a mix
            # of those hits hours in (tests/trainer/dflash/test_compile_bounded.py)
            with torch._dynamo.config.patch(
                fail_on_recompile_limit_hit=True, recompile_limit=RECOMPILE_LIMIT
            ):
                return compiled(*args, **kwargs)

        _COMPILED[key] = strict
    return _COMPILED[key]


def attention(device: torch.device) -> Callable[..., Any]:
    """flex_attention for ``device``: compiled (block-sparse and fused) or eager."""
    return _compiled("flex_attention", flex_attention, device)


def block_mask(device: torch.device) -> Callable[..., Any]:
    """create_block_mask for ``device``: compiled (no queries × keys temporary) or eager."""
    return _compiled("create_block_mask", create_block_mask, device)


def is_compiled(device: torch.device) -> bool:
    return device.type in COMPILE_ON
