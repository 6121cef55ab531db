"""`make bench`: the target served by vLLM plainly, with the model-free methods it ships (`ngram`, `suffix`)
and with each drafter (`dflash`), the run's held-out calls replayed against every server, the table printed
(docs/serving.md). Where vLLM cannot run, the CPU stand-in serves `plain` and the drafters (said in one line).

    python -m trainer.replay.bench --run runs/latest [--draft chat=runs/chat/export] [--calls 24]

Every server listens on 127.0.0.1 on a free port, logs to OUT/server-LABEL.log, and is stopped when the
bench ends, however it ends (an error, Ctrl-C, SIGTERM)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import FrameType

import typer
import yaml

from clikit import settings_command
from serving.drafter_load import DrafterLoadError, check_loads
from serving.launch import VllmServer
from serving.serve import model_path
from serving.venv import availability
from trainer.dflash.kinds import drafted_tokens, kind_of
from trainer.replay.calls import ReplayError
from trainer.replay.cli import exit_unranked, progress_reporter, run_replay
from trainer.replay.servers import RAW_LOGITS, VLLM_CPU_CANNOT, BenchSettings, Server, drafter_server, served
from trainer.replay.settings import ReplaySettings
from trainer.replay.summary import markdown

__all__ = ["BenchSettings", "Server", "bench", "bench_command", "notes", "served", "servers"]


def _sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through `served`, which stops the servers


def bench_engine(s: BenchSettings) -> str:
    if s.engine != "auto":
        return s.engine
    have = availability()
    if not have.ok:
        typer.echo(f"bench: {have.line()}", err=True)
    return "vllm" if have.ok else "standin"


def servers(s: BenchSettings, engine: str) -> dict[str, Server]:
    """label → server: `plain`, the model-free methods (vLLM only), then each drafter."""
    out: dict[str, Server] = {"plain": Server("plain", extra=RAW_LOGITS if engine == "vllm" else ())}
    for method in s.methods:
        if method not in ("ngram", "suffix"):
            raise ReplayError(f"--methods {method!r}: the model-free methods are ngram and suffix")
        if engine == "vllm":
            out[method] = Server(method)  # type: ignore[arg-type]
        else:
            typer.echo(
                f"bench: {method}: the CPU stand-in serves no {method} decoding; row left out", err=True
            )
    for text in s.draft or [f"dflash={s.run / 'export'}"]:
        label, _, path = text.partition("=")
        if not path or not Path(path).is_dir():
            raise ReplayError(f"--draft {text!r}: expected LABEL=DIR of an exported drafter")
        out[label] = drafter_server(Path(path), engine, s.gpu)
    return out


def notes(chosen: dict[str, Server], engine: str) -> dict[str, str]:
    """Per label served by another engine than the bench's: why."""
    out = {}
    for label, server in chosen.items():
        kind = kind_of(server.draft) if server.draft is not None else None
        if server.engine and server.engine != engine and kind in VLLM_CPU_CANNOT:
            out[label] = VLLM_CPU_CANNOT[kind]
    return out


def loads_whole(target: str, chosen: dict[str, Server], engine: str) -> None:
    """Every drafter vLLM serves is loaded by vLLM's own loader first: a tensor it leaves unloaded would
    serve as uninitialised memory and accept nothing, with no error anywhere (serving/vllm_load.py)."""
    for label, server in chosen.items():
        if server.draft is None or (server.engine or engine) != "vllm":
            continue
        try:
            check_loads(model_path(target), server.draft, server.method, drafted_tokens(server.draft))
        except DrafterLoadError as e:
            raise ReplayError(f"{label}: {e}") from None


def bench(s: BenchSettings) -> dict[str, object]:
    report_path = s.run / "data" / "report.json"
    if not report_path.is_file():
        raise ReplayError(f"--run {s.run}: no {report_path} (run `make train` first)")
    source = Path(json.loads(report_path.read_text())["source"])
    target = str(yaml.safe_load((s.run / "config.yaml").read_text()).get("target", "smollm2"))
    out = s.out or s.run / "replay"
    out.mkdir(parents=True, exist_ok=True)
    engine = bench_engine(s)
    chosen = servers(s, engine)
    loads_whole(target, chosen, engine)
    # A drafter that drafts nothing is a broken export; a lookup method with nothing to look up is not.
    drafters = [label for label, server in chosen.items() if server.draft is not None]
    model_free = [label for label, server in chosen.items() if server.method in ("ngram", "suffix")]
    with served(engine, target, chosen, s, out) as urls:
        settings = ReplaySettings(
            data=source,
            endpoint=[f"{label}={url}" for label, url in urls.items()],
            baseline="plain",
            speculative=drafters,
            held_out_from=s.run,
            calls=s.calls,
            max_tokens=s.max_tokens,
            decode_tokens=s.decode_tokens or None,
            min_draft_steps=s.min_draft_steps,
            rank=s.rank,
            model_free=model_free,
            dtype=VllmServer.model_validate({"dtype": s.served_dtype}).resolved_dtype()
            if engine == "vllm"
            else "float32",
            baseline_logits=engine == "vllm",
            concurrency=s.concurrency,
            timeout=s.timeout,
            out=out,
        )
        report = run_replay(settings, progress_reporter()[0])
    report["notes"] = notes(chosen, engine)
    if report["notes"]:  # the rows another engine served are marked in the table and said why
        (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        (out / "summary.md").write_text(markdown(report))
    return report


@settings_command(BenchSettings)
def bench_command(settings: BenchSettings) -> None:
    """Serve the target plainly, with ngram/suffix and with the run's drafter; replay its held-out calls."""
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        report = bench(settings)
    except ReplayError as e:
        typer.echo(f"bench: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(markdown(report))
    if report["refused"]:
        raise typer.Exit(1)
    exit_unranked(report, settings.rank, "bench")


if __name__ == "__main__":
    app = typer.Typer(add_completion=False)
    app.command()(bench_command)
    app()
