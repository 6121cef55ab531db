"""Training sequences: an exported dataset's `sequences` config as published (trainer/data/published.py), or
call records merged here by the rule the export uses (records.sequences); split, cut at span ends.

- Regenerated rows (``DATA/regenerated/``, trainer/regenerate.py) are re-sampled completions of recorded
  prompts: each becomes a sequence of its own (its source call's prompt, the new completion supervised) on
  its source call's side of the split; a re-sample of a held-out call is never trained on (counted).

- Session merge (`records.sequences.SessionMerge`): a call whose prompt begins with an earlier call's
  prompt + completion joins its sequence as a second supervised span.
- Held-out split by the rule every stage shares (`records.split`): whole repositories, with fewer than two
  whole sessions, with one session whole sequences; an export's own split is kept as it is.
- A sequence longer than ``max_len`` is cut only where a supervised span ends; the unsupervised prompt
  before a span may lose its oldest tokens, a span is never cut (one that cannot fit is dropped, counted).
  Training passes the target's context length here (a merged session never exceeds what the target
  served), so features always come from the whole context; its step budget is a separate setting.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lm.model import Target
from records import split
from records.io import regenerated_dir
from records.sequences import RECORDED, SEQUENCES_SCHEMA, Sequence, SessionMerge
from trainer.data.published import published_call_tokens, published_sequences, sequences_dir
from trainer.data.records import CallExample, Report, load_examples, read_rows
from trainer.data.regenerated import attach_regenerated, regenerated_report


def merge_sessions(examples: Iterable[CallExample]) -> list[Sequence]:
    """Each session's calls, in the order they started, merged by the rule the export shares
    (records.sequences.SessionMerge)."""
    by_session: dict[str, list[CallExample]] = defaultdict(list)
    for ex in examples:
        by_session[ex.session_id or f"call:{ex.call_id}"].append(ex)
    out: list[Sequence] = []
    for _, calls in sorted(by_session.items()):
        merge = SessionMerge()
        calls.sort(key=lambda e: (e.started_at, e.call_id))
        for ex in calls:
            merge.add(ex.call_id, ex.prompt_ids, ex.completion_ids, ex.supervise)
        first = calls[0]
        out += merge.sequences(first.session_id, repo=first.repo, agent=first.agent, lang=first.lang)
    return out


def cut(seq: Sequence, max_len: int, dropped: Counter[str]) -> list[Sequence]:
    """Pieces of at most ``max_len`` tokens that end where a span ends and never start inside a span."""
    if len(seq.input_ids) <= max_len:
        return [seq]
    pieces: list[Sequence] = []
    lo = 0  # first position the current piece may start at (after the previous piece)
    cur: list[int] = []  # indices of the spans in the current piece
    piece_start = 0

    def close() -> None:
        if not cur:
            return
        end = seq.span_ends[cur[-1]]
        piece = dataclasses.replace(
            seq,
            input_ids=seq.input_ids[piece_start:end],
            loss_mask=seq.loss_mask[piece_start:end],
            span_starts=[seq.span_starts[i] - piece_start for i in cur],
            span_ends=[seq.span_ends[i] - piece_start for i in cur],
            call_ids=[seq.call_ids[i] for i in cur if i < len(seq.call_ids)],
        )
        pieces.append(piece)

    for i, (s, e) in enumerate(zip(seq.span_starts, seq.span_ends, strict=True)):
        if e - s > max_len:
            dropped["span_longer_than_max_len"] += 1
            close()
            cur, lo = [], e
            continue
        if cur and e - piece_start <= max_len:
            cur.append(i)
        else:
            close()
            piece_start = max(lo, e - max_len)
            cur = [i]
        lo = e
    close()
    return pieces


def _unit_key(s: Sequence) -> str:
    """What the split holds out whole: the session (its id, as the export keys it), else its calls."""
    return s.session_id or f"calls:{','.join(s.call_ids)}"


def _sequence_key(s: Sequence) -> str:
    return f"sequence:{s.session_id}:{','.join(s.call_ids)}:{len(s.input_ids)}"


def split_groups(
    seqs: list[Sequence], eval_fraction: float, hints: dict[str, str] | None = None
) -> dict[str, str]:
    """Mark each sequence's ``split`` (train / test): the dataset's own split where its records carry one
    (an export's, per session), else `records.split`'s rule over the sessions, else (a single session)
    over the sequences. Returns how the split was made, for the report."""
    if hints and split.TEST in hints.values():
        for s in seqs:
            s.split = hints.get(_unit_key(s), split.TRAIN)
        by_repo: dict[str, set[str]] = {}
        for s in seqs:
            by_repo.setdefault(s.group, set()).add(s.split)
        mixed = any(len(v) > 1 for v in by_repo.values())
        return {"by": f"dataset split ({'whole sessions' if mixed else 'whole repositories'} held out)"}
    # the export's units, keyed as it keys them (a session's id), so both sides of the pipe agree
    units = {_unit_key(s): split.Unit(_unit_key(s), s.repo, len(s.call_ids) or 1) for s in seqs}
    plan, key = split.plan(list(units.values()), eval_fraction), _unit_key
    if plan.by == "none" and eval_fraction > 0 and len(seqs) >= 2:  # one session: its sequences
        plan = split.plan([split.Unit(_sequence_key(s)) for s in seqs], eval_fraction)
        plan.by, key = "sequence", _sequence_key
    for s in seqs:
        s.split = plan.side(key(s))
    out = {"by": plan.by}
    if plan.note or plan.by == "sequence":
        out["note"] = plan.note if plan.by != "sequence" else "a single session: whole sequences held out"
    return out


@dataclass
class BuildResult:
    train: list[Sequence]
    eval: list[Sequence]
    report: dict[str, Any]


def build(
    target: Target,
    source: str | Path,
    *,
    max_len: int = 3072,
    eval_fraction: float = 0.1,
    model: str | None = None,
    min_anchors: int = 1,
    max_context: int | None = None,
    regenerated: bool = True,
) -> BuildResult:
    """``max_context``: cut sequences longer than this (the target's positions; default ``max_len``).
    ``regenerated``: also train on re-sampled completions (an export's `regenerated` rows, or
    ``source/regenerated/`` beside call records). An exported dataset is read as published: its
    `sequences` config, its split."""
    published = sequences_dir(source)
    if published is not None:
        seqs, rec_report, how = published_sequences(target, published, model=model, regenerated=regenerated)
        dropped: Counter[str] = Counter()
        limit = max_context or max_len
        result = finish(seqs, rec_report, how, max_len=limit, min_anchors=min_anchors, dropped=dropped)
        recorded = [s for s in seqs if s.source == RECORDED]
        result.report["calls"] = sum(len(s.call_ids) for s in recorded)
        result.report["sessions"] = len({s.session_id or s.sequence_id for s in recorded})
        result.report["merge"] = merge_report(recorded, sum(published_call_tokens(s) for s in recorded))
        return result
    rows = read_rows(source)
    extra = regenerated_dir(source) if regenerated else None
    if extra is not None:
        rows = itertools.chain(rows, read_rows(extra))
    examples, rec_report = load_examples(target, rows, model=model)
    return build_from_examples(
        examples,
        rec_report,
        max_len=max_context or max_len,
        eval_fraction=eval_fraction,
        min_anchors=min_anchors,
    )


def _hints(examples: list[CallExample]) -> dict[str, str]:
    """The dataset's own split, per session: an export with too few repositories holds out whole sessions,
    so one repository can have sessions on both sides (keyed by repository, one side would be lost)."""
    return {e.session_id or f"calls:{e.call_id}": e.split_hint for e in examples if e.split_hint}


def heldout_call_ids(examples: list[CallExample], eval_fraction: float) -> set[str]:
    """The recorded calls `build_from_examples` holds out at ``eval_fraction`` (same merge, same split)."""
    merged = merge_sessions(examples)
    split_groups(merged, eval_fraction, _hints(examples))
    return {cid for s in merged if s.held_out for cid in s.call_ids}


def build_from_examples(
    examples: list[CallExample],
    rec_report: Report,
    *,
    max_len: int,
    eval_fraction: float,
    min_anchors: int = 1,
) -> BuildResult:
    resampled = [e for e in examples if e.regenerated_from]
    examples = [e for e in examples if not e.regenerated_from]
    calls_tokens = sum(len(e.prompt_ids) + len(e.completion_ids) for e in examples)
    merged = merge_sessions(examples)
    how = split_groups(merged, eval_fraction, _hints(examples))
    dropped: Counter[str] = Counter()
    extra = attach_regenerated(resampled, merged, dropped)
    result = finish(
        merged + extra, rec_report, how, max_len=max_len, min_anchors=min_anchors, dropped=dropped
    )
    result.report["calls"] = len(examples)
    result.report["sessions"] = len({e.session_id or e.call_id for e in examples})
    result.report["merge"] = merge_report(merged, calls_tokens)
    if resampled:
        result.report["regenerated"] = regenerated_report(resampled, extra, result.train)
    return result


def merge_report(merged: list[Sequence], calls_tokens: int) -> dict[str, Any]:
    merged_tokens = sum(len(s.input_ids) for s in merged)
    return {
        "sequences": len(merged),
        "target_tokens_per_call": calls_tokens,
        "target_tokens_merged": merged_tokens,
        "reduction": round(calls_tokens / merged_tokens, 3) if merged_tokens else None,
    }


def finish(
    seqs: list[Sequence],
    rec_report: Report,
    how: dict[str, str],
    *,
    max_len: int,
    min_anchors: int,
    dropped: Counter[str],
) -> BuildResult:
    """Split sequences (recorded and re-sampled) cut to ``max_len`` and kept when they have
    ``min_anchors``; the report's common part."""
    pieces = [p for s in seqs for p in cut(s, max_len, dropped)]
    kept = []
    for p in pieces:
        pairs = sum(1 for i in range(len(p.loss_mask) - 1) if p.loss_mask[i] and p.loss_mask[i + 1])
        if pairs < min_anchors:
            dropped["no_anchor"] += 1
            continue
        kept.append(p)
    train = [s for s in kept if not s.held_out]
    held = [s for s in kept if s.held_out]
    report: dict[str, Any] = {
        "records": rec_report.as_dict(),
        "max_len": max_len,
        "pieces": len(pieces),
        "dropped": dict(dropped),
        "split": {
            name: {
                "sequences": len(part),
                "groups": len({s.group for s in part}),
                "tokens": sum(len(s.input_ids) for s in part),
                "supervised_tokens": sum(s.supervised for s in part),
                "agents": dict(Counter(s.agent for s in part)),
                "languages": dict(Counter(s.lang for s in part)),
                "sources": dict(Counter(s.source for s in part)),
            }
            for name, part in (("train", train), ("eval", held))
        },
    }
    report["split"].update(how)
    return BuildResult(train, held, report)


def write(result: BuildResult, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", result.train), ("eval", result.eval)):
        rows = [s.row() for s in part]
        pq.write_table(pa.Table.from_pylist(rows, schema=SEQUENCES_SCHEMA), out / f"{name}.parquet")
    (out / "report.json").write_text(json.dumps(result.report, indent=2) + "\n")
    return out


def summary_line(report: dict[str, Any], n_train: int) -> str:
    """One line for the training log: what the data build kept, merged and held out."""
    rec, split = report["records"], report["split"]
    note = f" ({split['note']})" if split.get("note") else ""
    return (
        f"data: {rec['rows']} records, {rec['kept']} kept (excluded: {rec['excluded'] or 'none'}); "
        f"{report['calls']} calls -> {report['merge']['sequences']} sequences (target tokens "
        f"x{report['merge']['reduction']} fewer); train {n_train} / eval {split['eval']['sequences']} "
        f"sequences, held out by {split.get('by', 'repository')}{note}"
    )


def read(path: str | Path) -> list[Sequence]:
    return [Sequence.from_row(r) for r in pq.read_table(str(path)).to_pylist()]
