"""The parity gate against real vLLM: it passes an honest export and catches the two silent killers of
acceptance planted in one — target taps off by one, and q/k weights in another RoPE layout.

tiny-qwen3 (served from a folder) and a drafter overfit on its own greedy continuations, so acceptance is
high on both engines and a fault shows as a gap, not as noise around 1.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from lm import Target
from tests.serving.conftest import Waves
from tests.support.tiny import BLOCK, NEW_TOKENS, overfit
from trainer.evaluate import Prompt
from trainer.parity import drafter_parity
from trainer.parity_settings import ParitySettings

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def off_by_one(export: Path, out: Path) -> Path:
    """The convention slip the seed system paid for: every tap one layer later."""
    shutil.copytree(export, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [i + 1 for i in cfg["dflash_config"]["target_layer_ids"]]
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def interleaved(export: Path, out: Path) -> Path:
    """q/k rows permuted from the rotate-half (neox) layout to the adjacent-pairs one, as a converter written
    for the other RoPE style would leave them."""
    shutil.copytree(export, out)
    cfg = json.loads((out / "config.json").read_text())
    d = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    order = torch.stack([torch.arange(d // 2), torch.arange(d // 2) + d // 2], dim=1).reshape(-1)
    weights = load_file(out / "model.safetensors")
    for name, w in weights.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = w.shape[0] // d
            weights[name] = w.view(heads, d, -1)[:, order].reshape(w.shape).contiguous()
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def run(
    tiny: Target, tiny_rows: list[dict], tiny_drafter: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:  # type: ignore[type-arg]
    """A run folder as the gate reads it: the drafter as trained (ours), its exports (the engine's), and
    beside it an untrained drafter's run."""
    root = tmp_path_factory.mktemp("run")
    shutil.copytree(tiny_drafter, root / "drafter")
    shutil.copytree(tiny_drafter, root / "export")
    off_by_one(root / "export", root / "export-tap")
    interleaved(root / "export", root / "export-rope")
    overfit(tiny, tiny_rows, root / "untrained" / "drafter", steps=0)
    shutil.copytree(root / "untrained" / "drafter", root / "untrained" / "export")
    return root


@pytest.fixture(scope="module")
def urls(tiny_dir: Path, run: Path) -> Iterator[Waves]:
    """The module's servers, one per export served as drafter, started at once (four fit here, as the bench's
    four do). The target's own parity with vLLM (check a) is the harvest chain's: its gate runs it on a long
    prompt too (tests/factory/test_harvest_e2e.py)."""
    common = ("--model", str(tiny_dir), "--kv-cache-gib", "1", "--max-model-len", "512", "--dtype", "float32")
    servers = {}
    for export in ("export", "export-tap", "export-rope", "untrained/export"):
        spec = {"method": "dflash", "model": str(run / export), "num_speculative_tokens": BLOCK - 1}
        servers[export.replace("/", "-")] = (*common, "--speculative-config", json.dumps(spec))
    waves = Waves(servers, run, at_once=4)
    yield waves
    waves.close()


@pytest.fixture(scope="module")
def prompts(tiny_rows: list[dict]) -> list[Prompt]:  # type: ignore[type-arg]
    return [Prompt(r["prompt_token_ids"], r["agent"], r["lang"], r["session_id"]) for r in tiny_rows]


def settings(run: Path) -> ParitySettings:
    return ParitySettings(run=run, endpoint="unused", draft_tokens=BLOCK - 1, max_tokens=NEW_TOKENS)


@pytest.mark.parametrize(
    ("export", "passes"), [("export", True), ("export-tap", False), ("export-rope", False)]
)
def test_the_drafter_gate_passes_the_honest_export_and_catches_planted_faults(
    tiny: Target, prompts: list[Prompt], run: Path, urls: Waves, export: str, passes: bool
) -> None:
    result = drafter_parity(run, tiny, urls[export], prompts, settings(run))
    print(export, {k: result[k] for k in ("our_acceptance_length", "engine_mal", "relative_gap")})
    # overfit (4.0 at 80 steps): a fault cannot hide in noise around 1
    assert result["our_acceptance_length"] > 1.8
    assert result["ok"] is passes, result


def test_a_drafter_that_accepts_nothing_is_inconclusive_not_passed(
    tiny: Target, prompts: list[Prompt], run: Path, urls: Waves
) -> None:
    """An untrained drafter accepts (almost) nothing on both engines: a gap of 0 there proves nothing about
    taps, RoPE or weights, so the check is inconclusive — and the gate does not pass it unless allowed."""
    untrained = run / "untrained"
    result = drafter_parity(untrained, tiny, urls["untrained-export"], prompts, settings(untrained))
    assert result["engine_mal"] < 1.1
    assert result["status"] == "inconclusive", result
    assert result["ok"] is False
