"""`python -m trainer regenerate`: more supervised tokens from the same sessions.

An agent session gives a drafter one completion per call, and a harvest caps those (64 tokens on a CPU).
The prompts are the valuable part — long, tool-heavy, the agent's own — and the serving engine can answer
each again: N samples per recorded prompt, at the recorded temperature (or a given one), up to a
``max_tokens`` longer than the harvest's. vLLM caches the prompt's prefix, so a re-sample costs decoding only.

- Each request is the call's exact prompt ids on ``/v1/completions`` with ``return_token_ids``: the rows
  carry the engine's own ids, never a re-tokenization.
- Rows go to ``DATA/regenerated/`` (call-record schema, ``regenerated_from`` = the source call), beside the
  recorded ones and never over them (what is asked and how a row looks: trainer/regenerate_rows.py); the
  export publishes them (`make regenerate` exports again) and the trainer reads both.
- Held-out calls are not re-sampled: the split is the trainer's own (same rule, same ``eval_fraction``),
  and the trainer drops a re-sample of a held-out call anyway.
- Resumable: a row's id is (source call, sample index); what a part on disk already holds is skipped.
  Rows are written every ``flush_every`` answers, atomically, so a kill loses at most those.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import typer

from clikit import settings_command
from records.io import REGENERATED_DIR, write_part
from trainer.data.records import CallExample
from trainer.regenerate_rows import RegenerateError, RegenerateSettings, plan, request_seed, to_row, totals
from trainer.replay.bench import bench_engine
from trainer.replay.servers import BenchSettings, Server, served


class Meter:
    """Rows and tokens so far: a line per flush off a terminal, and a carriage-return line on one."""

    def __init__(self, total: int) -> None:
        self.total, self.rows, self.tokens, self.started = total, 0, 0, time.monotonic()
        self.tty = sys.stderr.isatty()

    def add(self, row: dict[str, Any]) -> None:
        self.rows += 1
        self.tokens += len(row["completion_token_ids"])
        if self.tty:
            typer.echo(f"\r{self.line()}", err=True, nl=False)

    def flushed(self) -> None:
        if not self.tty:
            typer.echo(self.line(), err=True)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return f"regenerate: {self.rows}/{self.total} samples, {self.tokens:,} tokens ({rate:,.1f} tok/s)"


async def _served_context(client: httpx.AsyncClient, url: str) -> tuple[str, int | None]:
    """The model name the engine serves and its context length (vLLM's /v1/models says both)."""
    reply = await client.get(f"{url}/v1/models")
    reply.raise_for_status()
    first = reply.json()["data"][0]
    ctx = first.get("max_model_len")
    return str(first["id"]), int(ctx) if ctx else None


async def regenerate(
    s: RegenerateSettings, url: str, todo: list[tuple[CallExample, int, float]], out: Path, meter: Meter
) -> int:
    """Ask for every planned sample (``concurrency`` in flight), writing parts as rows come; the number of
    samples skipped because the prompt leaves no room in the served context."""
    buffer: list[dict[str, Any]] = []
    too_long = 0

    def flush() -> None:
        if buffer:
            write_part(buffer, out, f"part-{os.getpid()}-{time.time_ns()}.parquet")
            buffer.clear()
            meter.flushed()

    async with httpx.AsyncClient(timeout=s.timeout) as client:
        model, ctx = await _served_context(client, url)
        work = iter(todo)

        async def worker() -> None:
            nonlocal too_long
            for ex, k, temperature in work:  # one iterator shared by the workers
                room = s.max_tokens if ctx is None else min(s.max_tokens, ctx - len(ex.prompt_ids))
                if room < 1:
                    too_long += 1
                    continue
                body: dict[str, Any] = {
                    "model": model,
                    "prompt": ex.prompt_ids,
                    "max_tokens": room,
                    "temperature": temperature,
                    "return_token_ids": True,
                }
                if s.seed is not None:
                    body["seed"] = request_seed(s.seed, ex.call_id, k)
                started = time.time()
                reply = await client.post(f"{url}/v1/completions", json=body)
                if reply.status_code >= 400:
                    raise RegenerateError(
                        f"{url}: HTTP {reply.status_code} for call {ex.call_id}: {reply.text[:300]}"
                    )
                buffer.append(to_row(ex, k, body, reply.json(), url, started, time.time()))
                meter.add(buffer[-1])
                if len(buffer) >= s.flush_every:
                    flush()

        try:
            await asyncio.gather(*(worker() for _ in range(s.concurrency)))
        finally:
            flush()  # what came back is kept, whatever stopped the run
    return too_long


def run(s: RegenerateSettings) -> dict[str, Any]:
    out = s.data / REGENERATED_DIR
    out.mkdir(parents=True, exist_ok=True)
    todo, facts = plan(s, out)
    typer.echo(
        f"regenerate: {facts['calls']} recorded calls, {facts['held_out_skipped']} held out (skipped), "
        f"{facts['already_done']} samples on disk; {len(todo)} samples to ask for",
        err=True,
    )
    meter = Meter(len(todo))
    too_long = 0
    if todo:
        with _engine(s, out) as url:
            too_long = asyncio.run(regenerate(s, url, todo, out, meter))
    have = totals(out)
    recorded = facts["recorded_supervised_tokens"]
    cores = os.cpu_count() or 1
    report = {
        **facts,
        "this_run": {
            "samples": meter.rows,
            "completion_tokens": meter.tokens,
            "skipped_prompt_fills_context": too_long,
            "seconds": round(meter.seconds, 1),
            "tokens_per_s": round(meter.tokens / meter.seconds, 2) if meter.rows else None,
            # the host's every core for the whole wall time: what a CPU box running only this spends
            "tokens_per_cpu_hour": round(meter.tokens / (meter.seconds * cores / 3600))
            if meter.rows
            else None,
            "host_cores": cores,
        },
        "on_disk": have,
        "supervised_multiplier": round((recorded + have["completion_tokens"]) / recorded, 2)
        if recorded
        else None,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


@contextlib.contextmanager
def _engine(s: RegenerateSettings, out: Path) -> Iterator[str]:
    """The engine's URL: --url as given, else vLLM CPU (or the stand-in) started here until the end."""
    if s.url:
        yield s.url.rstrip("/")
        return
    opts = BenchSettings(
        max_model_len=s.max_model_len,
        kv_cache_gib=s.kv_cache_gib,
        startup_timeout=s.startup_timeout,
        max_num_seqs=max(8, s.concurrency),
    )
    with served(bench_engine(opts), s.target, {"target": Server("plain")}, opts, out, "regenerate") as urls:
        yield urls["target"]


@settings_command(RegenerateSettings)
def regenerate_command(settings: RegenerateSettings) -> None:
    """Re-sample recorded agent prompts from the serving engine into DATA/regenerated (resumable)."""
    try:
        report = run(settings)
    except (RegenerateError, FileNotFoundError, httpx.HTTPError) as e:
        typer.echo(f"regenerate: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(report, indent=2))
