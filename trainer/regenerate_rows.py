"""What `python -m trainer regenerate` asks for and stores: its settings, the plan (every recorded training-side
call × sample still missing, at its recorded temperature), a stored row (the call-record schema with
`regenerated_from`), and what DATA/regenerated holds."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from lm import load_target
from records.schema import CallRecord
from trainer.data.build import heldout_call_ids
from trainer.data.records import CallExample, load_examples, read_rows
from trainer.errors import TrainerError
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


def request_seed(seed: int, call_id: str, k: int) -> int:
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


def to_row(
    ex: CallExample,
    k: int,
    body: dict[str, Any],
    reply: dict[str, Any],
    url: str,
    started: float,
    finished: float,
) -> dict[str, Any]:
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


def totals(out: Path) -> dict[str, int]:
    """What DATA/regenerated holds now (every run so far)."""
    rows = tokens = 0
    for f in sorted(out.glob("*.parquet")):
        t = pq.read_table(f, columns=["completion_tokens"])
        rows += t.num_rows
        tokens += sum(int(x or 0) for x in t.column("completion_tokens").to_pylist())
    return {"rows": rows, "completion_tokens": tokens}
