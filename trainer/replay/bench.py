"""`make bench`: the stand-in target served plainly and with each drafter, the run's held-out calls
replayed against them, the table printed (docs/serving.md).

    python -m trainer.replay.bench --run runs/latest [--draft chat=runs/chat/export] [--calls 24]

Every server listens on 127.0.0.1 on a free port, logs to OUT/server-LABEL.log, and is stopped when the
bench ends, however it ends (an error, Ctrl-C, SIGTERM)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import httpx
import typer
import yaml
from pydantic import BaseModel, Field

from clikit import settings_command
from trainer.replay.calls import ReplayError
from trainer.replay.cli import progress_reporter, run_replay
from trainer.replay.settings import ReplaySettings
from trainer.replay.summary import markdown


class BenchSettings(BaseModel):
    """Serve the CPU stand-in plainly and with drafters; replay a run's held-out calls against them."""

    run: Path = Field(
        default=Path("runs/latest"), description="The training run: its target, data and held-out split."
    )
    draft: list[str] = Field(
        default_factory=list,
        description="LABEL=DIR of a drafter to serve (repeat it); default dflash=RUN/export.",
    )
    calls: int = Field(default=24, ge=1, description="Held-out calls replayed.")
    concurrency: list[int] = Field(
        default_factory=lambda: [1, 8], description="Concurrency levels (default: 1 and 8)."
    )
    max_tokens: int = Field(
        default=64, ge=1, description="Cap on each call's completion length (a CPU decodes slowly)."
    )
    threads: int = Field(
        default=1, ge=1, description="Torch threads per server (1 is fastest on a shared CPU)."
    )
    max_num_seqs: int = Field(default=8, ge=1, description="Requests each server interleaves.")
    out: Path | None = Field(default=None, description="Where the report goes; default RUN/replay.")
    startup_timeout: float = Field(default=300.0, gt=0, description="Seconds a server may take to load.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ReplayError(f"the server for {url} exited with {proc.returncode}; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise ReplayError(f"the server for {url} did not answer /health within {timeout:.0f}s; see {log}")


@contextlib.contextmanager
def served(
    target: str, drafts: dict[str, Path | None], s: BenchSettings, out: Path
) -> Iterator[dict[str, str]]:
    """label → URL of one stand-in server per entry (None: plain decoding), all stopped on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    try:
        for label, draft in drafts.items():
            port = _free_port()
            cmd = [sys.executable, "-m", "trainer", "serve-target", "--model", target, "--host", "127.0.0.1",
                   "--port", str(port), "--threads", str(s.threads), "--max-num-seqs", str(s.max_num_seqs),
                   "--log-level", "warning"]  # fmt: skip
            if draft is not None:
                cmd += ["--draft", str(draft)]
            log = out / f"server-{label}.log"
            with log.open("wb") as f:
                procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT))
            urls[label] = f"http://127.0.0.1:{port}"
        for (label, url), proc in zip(urls.items(), procs, strict=True):
            _wait(url, proc, s.startup_timeout, out / f"server-{label}.log")
            typer.echo(f"bench: {label} serving {target} on {url}", err=True)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through `served`, which stops the servers


def _drafts(s: BenchSettings) -> dict[str, Path | None]:
    drafts: dict[str, Path | None] = {"base": None}
    for text in s.draft or [f"dflash={s.run / 'export'}"]:
        label, _, path = text.partition("=")
        if not path or not Path(path).is_dir():
            raise ReplayError(f"--draft {text!r}: expected LABEL=DIR of an exported drafter")
        drafts[label] = Path(path)
    return drafts


def bench(s: BenchSettings) -> dict[str, object]:
    report_path = s.run / "data" / "report.json"
    if not report_path.is_file():
        raise ReplayError(f"--run {s.run}: no {report_path} (run `make train` first)")
    source = Path(json.loads(report_path.read_text())["source"])
    target = str(yaml.safe_load((s.run / "config.yaml").read_text()).get("target", "smollm2"))
    out = s.out or s.run / "replay"
    out.mkdir(parents=True, exist_ok=True)
    drafts = _drafts(s)
    with served(target, drafts, s, out) as urls:
        settings = ReplaySettings(
            data=source,
            endpoint=[f"{label}={url}" for label, url in urls.items()],
            baseline="base",
            held_out_from=s.run,
            calls=s.calls,
            max_tokens=s.max_tokens,
            concurrency=s.concurrency,
            out=out,
        )
        return run_replay(settings, progress_reporter()[0])


@settings_command(BenchSettings)
def bench_command(settings: BenchSettings) -> None:
    """Serve the stand-in target plainly and with the run's drafter; replay its held-out calls; the table."""
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        report = bench(settings)
    except ReplayError as e:
        typer.echo(f"bench: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(markdown(report))
    if report["refused"]:
        raise typer.Exit(1)


if __name__ == "__main__":
    app = typer.Typer(add_completion=False)
    app.command()(bench_command)
    app()
