"""The services a harvest starts: the target (when no TARGET_URL is given: vLLM, or the CPU stand-in where vLLM
cannot run) and the proxy. Any target, a user's own included, is probed first the way the agents use it.

Each is a child process in its own process group (so a Ctrl-C on the terminal reaches the runner first,
which stops claiming and stops them in order) that also dies with the run however the run dies: Linux's
parent-death signal is armed in the child before it executes, and the run's ledger records its pid and
start time, so the next run reaps it if the signal could not be delivered (another OS, a wedged child)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

import httpx
from pydantic import BaseModel, Field
from rich.console import Console

from clikit.children import die_with_parent, free_port
from factory.errors import FactoryError
from factory.run.ledger import Ledger
from proxy.uploader import Uploader, UploaderSettings
from records.storage import StorageError, Store
from serving.check import TargetCheck, check_target
from serving.venv import availability
from wire import UpstreamApi

Engine = Literal["vllm", "standin", "scripted"]


class ServiceOptions(BaseModel):
    data_dir: Path = Field(default=Path("data"), description="Database, calls, logs and dataset.")
    target_url: str | None = Field(
        default=None, description="An OpenAI-compatible target; unset: start the CPU stand-in."
    )
    target_model: str = Field(
        default="smollm2", description="The local target's model when TARGET_URL is unset."
    )
    target_engine: Literal["auto", "vllm", "standin", "scripted"] = Field(
        default="auto",
        description="What serves the local target: vllm (make vllm installs it), standin (the CPU test double), "
        "scripted (the rehearsal's scripted brain: sessions of 5–60 turns, calls tagged rehearsal, never "
        "trained on), or auto (vLLM where it can run here).",
    )
    # Claude Code's first prompt with its tools rendered is ≈ 12.5k SmolLM2 tokens and a session grows.
    target_max_model_len: int = Field(default=32768, ge=1, description="Context the local target serves.")
    # A CPU cannot decode 32k tokens within a session: the proxy lowers larger limits to this (recorded).
    target_max_tokens: int = Field(
        default=64, ge=1, description="Local target: the proxy lowers larger completion limits to this."
    )
    upstream_api: UpstreamApi = Field(
        default="chat", description="chat (token ids on every call) or native, for a TARGET_URL."
    )
    target_arg: list[str] = Field(
        default_factory=list,
        description="Extra argument for the target's server: `serving serve` (vLLM) or the stand-in's (repeatable).",
    )
    proxy_port: int = Field(default=0, ge=0, le=65535, description="The proxy's port (0: a free one).")
    target_port: int = Field(default=0, ge=0, le=65535, description="The stand-in's port (0: a free one).")

    def proxy_upstream_api(self) -> UpstreamApi:
        """What the proxies send the target: `upstream_api` for a TARGET_URL; the stand-in speaks Chat only."""
        return self.upstream_api if self.target_url else "chat"


class Service:
    """A child process with its log under DATA_DIR/logs, ready once `health_url` answers 200.

    Start it from the thread that lives as long as the run: the parent-death signal follows the thread
    that forked the child."""

    def __init__(
        self, name: str, argv: list[str], health_url: str, log_dir: Path, ledger: Ledger | None = None
    ) -> None:
        self.name, self.argv, self.health_url, self.ledger = name, argv, health_url, ledger
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> None:
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),  # only prctl and getppid run between fork and exec
            )
        if self.ledger is not None:
            self.ledger.add_process(self.name, self.proc.pid)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.health_url, timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f}s; see {self.log_path}")

    def stop(self, timeout_s: float = 30) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def target_engine(opts: ServiceOptions, console: Console) -> Engine:
    """The engine a local target runs on: vLLM unless it cannot run here (said in one line) or the stand-in
    was asked for."""
    if opts.target_engine != "auto":
        return opts.target_engine
    have = availability()
    if not have.ok:
        console.print(f"[yellow]target[/] {have.line()}", soft_wrap=True)
        return "standin"
    return "vllm"


def _target(opts: ServiceOptions, console: Console, ledger: Ledger | None) -> tuple[str, Service | None]:
    if opts.target_url:
        return opts.target_url, None
    port = opts.target_port or free_port()
    url = f"http://127.0.0.1:{port}"
    common = [
        "--model",
        opts.target_model,
        "--port",
        str(port),
        "--max-model-len",
        str(opts.target_max_model_len),
    ]
    engine = target_engine(opts, console)
    if engine == "scripted":
        console.print(
            f"[bold]target[/] starting the scripted brain on {url} (a rehearsal: its calls are never trained on)"
        )
        # At least ten turns a session: a harvest with the brain is there to drive each CLI's multi-turn path.
        argv = [sys.executable, "-m", "rehearsal", "serve", "--port", str(port), "--turns-min", "10"]
        argv += opts.target_arg
    elif engine == "vllm":
        console.print(
            f"[bold]target[/] starting vLLM ({opts.target_model}) on {url} (the first start compiles)"
        )
        argv = [sys.executable, "-m", "serving", "serve", *common, *opts.target_arg]
    else:
        console.print(f"[bold]target[/] starting the CPU stand-in ({opts.target_model}) on {url}")
        argv = [
            sys.executable,
            "-m",
            "trainer",
            "serve-target",
            *common,
            "--max-tokens-cap",
            str(opts.target_max_tokens),
            *opts.target_arg,
        ]
    svc = Service("target", argv, f"{url}/health", opts.data_dir / "logs", ledger)
    svc.start(timeout_s=900)
    return url, svc


def checked_target(url: str, console: Console) -> TargetCheck:
    """The target probed the way the agents will use it; every problem is said, and the run refused."""
    result = check_target(url)
    if not result.ok:
        raise TargetRefused(
            "the target would refuse the agents' calls:\n"
            + "\n".join(f"  - {p}" for p in result.problems)
            + "\n(docs/factory.md lists the flags a vLLM needs for the three agents)"
        )
    console.print(
        f"[bold]target[/] {result.model} serves {result.max_model_len:,} tokens; tool calls accepted"
    )
    return result


class Served(NamedTuple):
    proxy: str  # the proxy's URL
    target: str  # the target's URL
    model: str  # the id requests name
    root: str  # what the target serves (vLLM's `root`: the model path; the stand-in's local folder)


@contextlib.contextmanager
def services(
    opts: ServiceOptions, console: Console, ledger: Ledger | None = None, store_url: str | None = None
) -> Iterator[Served]:
    """The proxy in front of the target; both stopped on exit. With `store_url` the proxy uploads its
    rolled parts there itself (what it could not upload by its exit: `upload_to_store`)."""
    started: list[Service] = []
    try:
        target, svc = _target(opts, console, ledger)
        started += [svc] if svc else []
        checked_target(target, console)
        models = httpx.get(f"{target.rstrip('/')}/v1/models", timeout=30).json()
        model = str(models["data"][0]["id"])
        root = str(models["data"][0].get("root") or model)
        pport = opts.proxy_port or free_port()
        proxy = f"http://127.0.0.1:{pport}"
        upstream_api = opts.proxy_upstream_api()
        calls = f"{store_url}/calls" if store_url else f"{opts.data_dir}/calls"
        console.print(f"[bold]proxy[/] {proxy} → {target} (upstream API: {upstream_api}), calls → {calls}")
        argv = [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--upstream",
            target,
            "--host",
            "127.0.0.1",
            "--port",
            str(pport),
            "--data-dir",
            str(opts.data_dir),
            "--upstream-api",
            upstream_api,
        ]
        if (
            not opts.target_url and opts.target_engine != "scripted"
        ):  # a CPU decodes a few tokens a second: the agents' 32k limits are lowered
            argv += ["--max-tokens-cap", str(opts.target_max_tokens)]
        if store_url:
            # A short final drain: `stop` gives the proxy 30 s in all, and `upload_to_store` takes what is left.
            argv += ["--store-url", store_url, "--upload-drain-s", "10"]
        if ledger is not None:
            ledger.set_spool(opts.data_dir / "spool")
        proxy_svc = Service("proxy", argv, f"{proxy}/healthz", opts.data_dir / "logs", ledger)
        started.append(proxy_svc)
        proxy_svc.start(timeout_s=120)
        yield Served(proxy, target, model, root)
    finally:
        for s in reversed(started):
            s.stop()


def _upload_calls(data_dir: Path, store_url: str) -> str:
    """The parts still in DATA_DIR/calls, to STORE/calls: the proxy's own uploader, in this process, trying
    as long as `python -m proxy.uploader --once` would; raises StoreUnavailable when parts are left."""
    try:
        up = Uploader(data_dir / "calls", Store.from_url(store_url))
        left = up.drain(UploaderSettings.model_fields["drain_s"].default)
        error = up.stats.last_error
    except (StorageError, OSError) as exc:  # a URL that cannot be opened (or s3fs missing for s3://)
        left, error = -1, f"{type(exc).__name__}: {exc}"
    if left:
        retry = f"python -m proxy.uploader --data-dir {data_dir} --store-url {store_url} --once"
        raise StoreUnavailable(
            f"calls could not all be uploaded to {store_url} ({error}); they are safe in {data_dir}/calls: "
            f"run `{retry}` once the store answers, then `python -m factory export --calls-url {store_url}`"
        )
    return f"uploaded {up.stats.uploaded} part(s) to {store_url}; 0 left"


def upload_to_store(data_dir: Path, store_url: str) -> str:
    """After the proxy stopped (and its spool was rolled): the parts still in DATA_DIR/calls go to the store,
    and the transcripts to STORE/transcripts/ and the services' logs to STORE/logs/HOST/, under the keys the
    Ray nodes use (a copy: the database names the local files).
    Raises StoreUnavailable when parts are left, so the export never reads a bucket that lacks calls."""
    calls = _upload_calls(data_dir, store_url)
    root = data_dir / "transcripts"
    transcripts = sorted(root.rglob("*.jsonl.zst")) if root.is_dir() else []
    logs = sorted((data_dir / "logs").glob("*.log"))  # the services' logs, under the key the Ray nodes use
    try:
        store = Store.from_url(store_url)
        for path in transcripts:
            store.upload(path, f"transcripts/{path.relative_to(root).as_posix()}")
        for path in logs:
            store.upload(path, f"logs/{socket.gethostname()}/{path.name}")
    except (
        Exception
    ) as exc:  # the calls are in the store; transcripts and logs stay in the data dir either way
        return f"{calls}; transcripts and logs not uploaded ({type(exc).__name__}: {exc}), kept in {data_dir}"
    return (
        f"{calls}; {len(transcripts)} transcript(s) to {store_url}/transcripts, "
        f"{len(logs)} log(s) to {store_url}/logs/{socket.gethostname()}"
    )


class TargetRefused(FactoryError, RuntimeError):
    """The target would refuse the agents' calls (no tool parser, a template without tools, a short context)."""


class StoreUnavailable(FactoryError, RuntimeError):
    """Rolled parts could not be uploaded to the store (they stay in the data dir)."""
