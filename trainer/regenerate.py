"""`python -m trainer regenerate`: more supervised tokens from the same sessions.

An agent session gives a drafter one completion per call, and a harvest caps those (64 tokens on a CPU).
The prompts are the valuable part — long, tool-heavy, the agent's own — and the serving engine can answer
each again: N samples per recorded prompt, at the recorded temperature (or a given one), up to a
``max_tokens`` longer than the harvest's. vLLM caches the prompt's prefix, so a re-sample costs decoding only.

- Each request is the call's exact prompt ids on ``/v1/completions`` with ``return_token_ids``: the rows
  carry the engine's own ids, never a re-tokenization.
- Rows go to ``DATA/regenerated/`` (call-record schema, ``regenerated_from`` = the source call), beside the
  recorded ones and never over them; the trainer reads both (trainer/data/regenerated.py).
- Held-out calls are not re-sampled: the split is the trainer's own (same rule, same ``eval_fraction``),
  and the trainer drops a re-sample of a held-out call anyway.
- Resumable: a row's id is (source call, sample index); what a part on disk already holds is skipped.
  Rows are written every ``flush_every`` answers, atomically, so a kill loses at most those.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pyarrow.parquet as pq
import typer
from pydantic import BaseModel, Field

from clikit import settings_command
from lm import load_target
from records.io import REGENERATED_DIR, write_part
from records.schema import CallRecord
from trainer.data.build import heldout_call_ids
from trainer.data.records import CallExample, load_examples, read_rows
from trainer.errors import TrainerError
from trainer.replay.bench import bench_engine
from trainer.replay.servers import BenchSettings, Server, served
from wire import API_SHAPES, Api


class RegenerateSettings(BaseModel):
    """Re-sample completions of recorded agent prompts from the serving engine (rows beside the recorded)."""

    data: Path = Field(default=Path("data"), description="The harvest folder (its dataset/ or calls/).")
    target: str = Field(default="smollm2", description="The target model (its tokenizer reads the rows).")
    url: str | None = Field(
        default=None, description="A serving engine already up (vLLM); default: start one here."
    )
    engine: Literal["auto", "vllm", "standin"] = Field(
        default="auto", description="What to start when no --url is given (auto: vLLM where it runs)."
    )
    samples: int = Field(default=4, ge=1, description="Completions per recorded prompt.")
    max_tokens: int = Field(default=256, ge=1, description="Completion limit of each re-sample.")
    temperature: float | None = Field(
        default=None, ge=0, description="Sampling temperature; default: each call's recorded one (else 1.0)."
    )
    # vLLM CPU 0.32 dies on a per-request seed once a prompt is prefilled in chunks ("CPU Generator does
    # not use offset"), and agent prompts always are: no seed is sent unless one is asked for.
    seed: int | None = Field(
        default=None, description="Seed each request (with its call and sample index); GPU vLLM only."
    )
    eval_fraction: float = Field(
        default=0.15, ge=0, lt=1, description="The trainer's held-out fraction: those calls are skipped."
    )
    concurrency: int = Field(default=2, ge=1, description="Requests in flight.")
    flush_every: int = Field(default=16, ge=1, description="Rows per part written (a kill loses fewer).")
    max_model_len: int = Field(default=16384, ge=256, description="vLLM started here: its context.")
    kv_cache_gib: float = Field(default=2.0, gt=0, description="vLLM started here: its KV cache (GiB).")
    startup_timeout: float = Field(default=900.0, gt=0, description="Seconds the engine may take to load.")
    timeout: float = Field(default=1800.0, gt=0, description="Seconds one request may take.")


class RegenerateError(TrainerError):
    """A refusal the command reports in one sentence."""


def sample_id(call_id: str, k: int) -> str:
    return f"{call_id}~regen{k}"


def done_ids(out: Path) -> set[str]:
    """Call ids already on disk (resume)."""
    ids: set[str] = set()
    for f in sorted(out.glob("*.parquet")):
        ids.update(pq.read_table(f, columns=["call_id"]).column("call_id").to_pylist())
    return ids


def _seed(seed: int, call_id: str, k: int) -> int:
    digest = hashlib.sha256(f"{seed}:{call_id}:{k}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def recorded_temperatures(rows: Iterator[dict[str, Any]], into: dict[str, float]) -> Iterator[dict[str, Any]]:
    """Pass rows through, noting each call's requested temperature (absent: the engine's default, 1.0)."""
    for row in rows:
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            t = json.loads(row.get("request_json") or "{}").get("temperature")
            if isinstance(t, int | float):
                into[str(row.get("call_id"))] = float(t)
        yield row


def plan(s: RegenerateSettings, out: Path) -> tuple[list[tuple[CallExample, int, float]], dict[str, Any]]:
    """(source example, sample index, temperature) still to do, and what was planned (for the report)."""
    target = load_target(s.target)
    temps: dict[str, float] = {}
    examples, report = load_examples(target, recorded_temperatures(read_rows(s.data), temps))
    recorded = [e for e in examples if not e.regenerated_from]
    held = heldout_call_ids(recorded, s.eval_fraction)
    have = done_ids(out)
    todo = [
        (ex, k, s.temperature if s.temperature is not None else temps.get(ex.call_id, 1.0))
        for ex in recorded
        if ex.call_id not in held
        for k in range(s.samples)
        if sample_id(ex.call_id, k) not in have
    ]
    facts = {
        "records": report.as_dict(),
        "calls": len(recorded),
        "held_out_skipped": len(held),
        "already_done": len(have),
        "recorded_supervised_tokens": sum(sum(e.supervise) for e in recorded if e.call_id not in held),
    }
    return todo, facts


def to_row(ex: CallExample, k: int, body: dict[str, Any], reply: dict[str, Any], url: str,
           started: float, finished: float) -> dict[str, Any]:  # fmt: skip
    """The stored row: the call-record schema, the source's prompt ids, the engine's completion ids."""
    choice = (reply.get("choices") or [{}])[0]
    ids = choice.get("token_ids")
    if not isinstance(ids, list):
        raise RegenerateError(f"{url} sent no token_ids (it must honour return_token_ids, as vLLM does)")
    echoed = choice.get("prompt_token_ids")
    if echoed is not None and list(echoed) != ex.prompt_ids:
        raise RegenerateError(f"{url} echoed other prompt ids than the recorded call {ex.call_id}'s")
    usage = reply.get("usage") or {}
    stamp = dt.datetime.fromtimestamp(started, tz=dt.UTC), dt.datetime.fromtimestamp(finished, tz=dt.UTC)
    return CallRecord(
        call_id=sample_id(ex.call_id, k),
        session_id=ex.session_id,
        agent=ex.agent,
        api=Api.COMPLETIONS.value,
        method=API_SHAPES[Api.COMPLETIONS].method,
        path=API_SHAPES[Api.COMPLETIONS].path,
        model=str(reply.get("model") or body["model"]),
        stream=False,
        status_code=200,
        outcome="ok",
        request_json=json.dumps({**body, "prompt": f"<{len(ex.prompt_ids)} ids: prompt_token_ids>"}),
        response_json=json.dumps(
            {**reply, "choices": [{k2: v for k2, v in choice.items() if "token_ids" not in k2}]}
        ),
        started_at=stamp[0],
        finished_at=stamp[1],
        prompt_tokens=usage.get("prompt_tokens", len(ex.prompt_ids)),
        completion_tokens=usage.get("completion_tokens", len(ids)),
        prompt_token_ids=list(ex.prompt_ids),
        completion_token_ids=[int(t) for t in ids],
        token_ids_source="upstream",
        finish_reason=choice.get("finish_reason"),
        upstream=url,
        regenerated_from=ex.call_id,
    ).as_row()


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
                body: dict[str, Any] = {"model": model, "prompt": ex.prompt_ids, "max_tokens": room,
                                        "temperature": temperature, "return_token_ids": True}  # fmt: skip
                if s.seed is not None:
                    body["seed"] = _seed(s.seed, ex.call_id, k)
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


def totals(out: Path) -> dict[str, int]:
    """What DATA/regenerated holds now (every run so far)."""
    rows = tokens = 0
    for f in sorted(out.glob("*.parquet")):
        t = pq.read_table(f, columns=["completion_tokens"])
        rows += t.num_rows
        tokens += sum(int(x or 0) for x in t.column("completion_tokens").to_pylist())
    return {"rows": rows, "completion_tokens": tokens}


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
    opts = BenchSettings(max_model_len=s.max_model_len, kv_cache_gib=s.kv_cache_gib,
                         startup_timeout=s.startup_timeout, max_num_seqs=max(8, s.concurrency))  # fmt: skip
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
