"""Which recorded calls are replayed: the held-out ones, sampled evenly over agent × language (seeded).

Held out means what training did not see: an exported dataset's `test` split; else the held-out split of
a training run (`RUN/data/eval.parquet` names its call ids); else the rule the export and the trainer
share (`records.split`: whole repositories, else whole sessions) at `eval_fraction`.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from records import split
from records.agents import OTHER_AGENT
from trainer.data.records import read_rows
from trainer.errors import TrainerError
from wire import Api, shape_of


class ReplayError(TrainerError):
    """A refusal or a failure the replay reports in one sentence (no traceback)."""


@dataclass
class ReplayCall:
    call_id: str
    agent: str
    language: str
    recorded_tokens: int  # the recorded completion's length
    max_tokens: int
    prompt_ids: list[int] | None  # the exact prompt, replayed on /v1/completions
    chat: dict[str, Any] | None = None  # without ids: the Chat Completions body, on /v1/chat/completions

    @property
    def group(self) -> str:
        return f"{self.agent}/{self.language}"

    @property
    def prompt_tokens(self) -> int | None:
        return len(self.prompt_ids) if self.prompt_ids is not None else None


def _chat_body(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Chat Completions body the target was asked (Anthropic and Responses through the translators)."""
    try:
        if row.get("translated") and row.get("upstream_request_json"):
            return dict(json.loads(row["upstream_request_json"]))
        body = json.loads(row.get("request_json") or "null")
        if not isinstance(body, dict):
            return None
        api = row.get("api")
        if api == Api.CHAT:  # the pivot: already the body the target was asked
            return body
        shape = shape_of(api)
        if shape is not None and shape.to_chat is not None:
            return dict(shape.to_chat(body).request)
    except (TypeError, ValueError, KeyError):
        return None
    return None


def _run_held_out(run_dir: Path) -> set[str]:
    path = run_dir / "data" / "eval.parquet"
    if not path.is_file():
        raise ReplayError(
            f"--held-out-from {run_dir}: no {path} (a run directory written by `trainer train`)"
        )
    ids = pq.read_table(path, columns=["call_ids"]).column("call_ids").to_pylist()
    return {c for row in ids for c in row or []}


def held_out(
    rows: list[dict[str, Any]], source: Path, run_dir: Path | None, fraction: float
) -> tuple[list[dict[str, Any]], str]:
    """(the held-out rows, how they were chosen)."""
    splits = {r["split_hint"] for r in rows if r.get("split_hint")}
    if splits:
        held = [r for r in rows if r.get("split_hint") == split.TEST]
        if not held:
            raise ReplayError(
                f"{source} has no held-out calls: its files are the {sorted(splits)} split only "
                "(an export writes test-*.parquet for the held-out repositories)"
            )
        return held, "the dataset's test split"
    if run_dir is not None:
        ids = _run_held_out(run_dir)
        held = [r for r in rows if r["call_id"] in ids]
        if not held:
            raise ReplayError(f"none of the {len(ids)} held-out calls of run {run_dir} is in {source}")
        return held, f"the held-out split of run {run_dir}"

    def unit(row: Mapping[str, Any]) -> str:
        return str(row.get("session_id") or row["call_id"])

    per_unit = Counter(unit(r) for r in rows)
    repo = {unit(r): r.get("repo") for r in rows}
    plan = split.plan([split.Unit(u, repo[u], n) for u, n in per_unit.items()], fraction)
    if not plan.held_out:
        raise ReplayError(
            f"{source} has no held-out calls: all its calls belong to one session, which the trainer would "
            "train on (pass --held-out-from RUN or an exported dataset's test split)"
        )
    held = [r for r in rows if unit(r) in plan.held_out]
    whole = "repositories" if plan.by == "repository" else "sessions"
    return held, f"whole {whole} held out at {fraction} (the rule the trainer and the export share)"


def to_call(row: Mapping[str, Any], cap: int, decode: int | None = None) -> ReplayCall | None:
    """A replayable call, or None (failed, translation-only or empty calls are not replayed). It decodes
    `decode` tokens when given, else its recorded length capped at `cap`."""
    if row.get("tag") or (row.get("status_code") or 200) != 200 or row.get("outcome") not in (None, "ok"):
        return None
    ids = row.get("prompt_token_ids")
    completion = row.get("completion_token_ids")
    recorded = len(completion) if completion else int(row.get("completion_tokens") or 0)
    if recorded <= 0:
        return None
    chat = None if ids else _chat_body(row)
    if not ids and chat is None:
        return None
    return ReplayCall(
        call_id=str(row["call_id"]),
        agent=str(row.get("agent") or OTHER_AGENT),
        language=str(row.get("lang") or "en"),
        recorded_tokens=recorded,
        max_tokens=decode or min(recorded, cap),
        prompt_ids=[int(i) for i in ids] if ids else None,
        chat=chat,
    )


def stratified(calls: Iterable[ReplayCall], n: int, seed: int) -> list[ReplayCall]:
    """Up to `n` calls taken round robin over agent × language strata, each stratum shuffled by `seed`."""
    strata: dict[str, list[ReplayCall]] = defaultdict(list)
    for c in sorted(calls, key=lambda c: c.call_id):
        strata[c.group].append(c)
    rng = random.Random(seed)
    queues = [rng.sample(strata[k], len(strata[k])) for k in sorted(strata)]
    out: list[ReplayCall] = []
    depth = 0
    while len(out) < n and any(len(q) > depth for q in queues):
        out.extend(q[depth] for q in queues if len(q) > depth and len(out) < n)
        depth += 1
    return out[:n]


def load_calls(
    source: Path,
    *,
    n: int,
    seed: int,
    cap: int,
    run_dir: Path | None = None,
    fraction: float = 0.15,
    decode: int | None = None,
) -> tuple[list[ReplayCall], dict[str, Any]]:
    """The sampled held-out calls and a summary of the selection (for the report)."""
    try:
        rows = list(read_rows(source))
    except FileNotFoundError as e:
        raise ReplayError(f"--data {source}: {e}") from None
    held, how = held_out(rows, source, run_dir, fraction)
    usable = [c for c in (to_call(r, cap, decode) for r in held) if c is not None]
    if not usable:
        raise ReplayError(
            f"{source}: none of the {len(held)} held-out calls is replayable (all failed or empty)"
        )
    sample = stratified(usable, n, seed)
    summary = {
        "source": str(source),
        "held_out_by": how,
        "rows": len(rows),
        "held_out_calls": len(held),
        "replayable": len(usable),
        "sampled": len(sample),
        "by_token_ids": sum(c.prompt_ids is not None for c in sample),
        "by_chat_fallback": sum(c.prompt_ids is None for c in sample),
        "seed": seed,
        "decode_tokens": decode,
    }
    return sample, summary
