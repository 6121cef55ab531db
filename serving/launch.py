"""How the project starts vLLM: one settings model → the server's argv and environment.

The defaults are what the three agents need from a served SmolLM2 on a CPU (docs/target.md):
- `--enable-auto-tool-choice --tool-call-parser hermes`: every agent sends `tool_choice: "auto"`, which
  vLLM refuses without them;
- a chat template that renders the tools (SmolLM2's own ignores them) in the Hermes convention the parser
  reads back (`lm/templates/smollm2_tools.jinja`, the same file the trainer renders with);
- a 32,768-token context: Claude Code's first prompt is ≈ 12.5k SmolLM2 tokens once its tools are rendered
  (the cached SmolLM2 folder declares that many positions: lm/loading.py);
- prefix caching, so an agent's next turn costs its new tokens only.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from serving.venv import native_bf16, python

SMOLLM2 = "smollm2"
TINY_QWEN3 = "tiny-qwen3"
Method = Literal["plain", "ngram", "suffix", "dflash", "dspark"]  # DFlash2 is served as `dflash`


def standin_template(name: str = "smollm2_tools.jinja") -> Path:
    """A chat template the target package ships, found without importing it (it imports torch)."""
    spec = importlib.util.find_spec("lm")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the lm package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "templates" / name


def served_template(model: str) -> str | None:
    """The chat template `serve` starts `model` with when none is given (None: the tokenizer's own)."""
    return str(standin_template()) if model == SMOLLM2 else None


def speculative_config(method: Method, draft: Path | None = None, tokens: int = 7) -> dict[str, Any] | None:
    """vLLM's --speculative-config for a method (None: plain decoding)."""
    if method == "plain":
        return None
    if method == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": tokens,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 4,
        }
    if method == "suffix":
        return {"method": "suffix", "num_speculative_tokens": tokens}
    if draft is None:
        raise ValueError(f"the {method} method needs a drafter directory")
    return {"method": method, "model": str(draft), "num_speculative_tokens": tokens}


class VllmServer(BaseModel):
    """`python -m serving serve`: a vLLM OpenAI-compatible server for the project's target."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        SMOLLM2, description="smollm2 (the CPU target), tiny-qwen3 (for tests), a model folder or a Hub name."
    )
    served_model_name: str | None = Field(None, description="Model id in the API; default: --model's value.")
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
    max_model_len: int = Field(32768, ge=256, description="Served context (prompt + completion) in tokens.")
    dtype: str = Field(
        "auto", description="vLLM's --dtype; auto: bfloat16 where the CPU computes it natively, else float32."
    )
    kv_cache_gib: float = Field(4.0, gt=0, description="KV cache on a CPU host (VLLM_CPU_KVCACHE_SPACE).")
    prefix_caching: bool = Field(True, description="Reuse the KV of a prompt's cached prefix.")
    tool_call_parser: str | None = Field(
        "hermes", description="vLLM's tool-call parser; none: the agents' tool_choice=auto is refused."
    )
    chat_template: Path | None = Field(
        None, description="Chat template; default for smollm2: the project's, which renders tools."
    )
    speculative_config: str | None = Field(
        None, description="vLLM's --speculative-config JSON (a method, a drafter, draft tokens)."
    )
    threads: int | None = Field(None, ge=1, description="CPU threads for the engine (OMP); default: vLLM's.")
    compile: bool = Field(
        True, description="torch.compile the model (a faster server; the first start compiles for minutes)."
    )
    extra_arg: list[str] = Field(default_factory=list, description="More vLLM arguments (repeatable).")

    def model_id(self) -> str:
        return self.served_model_name or self.model

    def resolved_dtype(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if native_bf16() else "float32"

    def argv(self, model_path: str) -> list[str]:
        """The server's command line; `model_path` is what `model` resolved to (a folder or Hub name)."""
        template = self.chat_template or served_template(self.model)
        argv = [
            str(python()),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model_path,
            "--served-model-name",
            self.model_id(),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--dtype",
            self.resolved_dtype(),
            "--disable-uvicorn-access-log",
        ]
        argv.append("--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching")
        if self.tool_call_parser:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if template is not None:
            argv += ["--chat-template", str(template)]
        if self.speculative_config:
            json.loads(self.speculative_config)  # a typo fails here, not minutes into the server's start
            argv += ["--speculative-config", self.speculative_config]
        if not self.compile:
            argv += ["--enforce-eager"]
        return argv + self.extra_arg

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{self.kv_cache_gib:g}")
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")
        # vLLM keeps one core for its front end by default; on a 2-core host that halves the model's share.
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        return env
