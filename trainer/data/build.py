"""Training sequences from call records: session merge, held-out split by repository, cuts at span ends.

- Regenerated rows (``DATA/regenerated/``, trainer/regenerate.py) are re-sampled completions of recorded
  prompts: each becomes a sequence of its own (its source call's prompt, the new completion supervised) on
  its source call's side of the split; a re-sample of a held-out call is never trained on (counted).

- Session merge: an agent resends its whole history with every call. When a later call's prompt begins,
  token for token, with an earlier call's prompt + completion, the two become one sequence with two
  supervised spans, so the target runs once over the session instead of once per call.
- Held-out split by the rule every stage shares (`records.split`): whole repositories, with fewer than two
  whole sessions, with one session whole sequences; an export's own split is kept as it is.
- A sequence longer than ``max_len`` is cut only where a supervised span ends; the unsupervised prompt
  before a span may lose its oldest tokens, a span is never cut (one that cannot fit is dropped, counted).
  Training passes the target's context length here (a merged session never exceeds what the target
  served), so features always come from the whole context; its step budget is a separate setting.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from records import split
from records.io import regenerated_dir
from standin.model import Target
from trainer.data.records import CallExample, Report, load_examples, read_rows
from trainer.data.regenerated import attach_regenerated, regenerated_report
from trainer.data.sequence import Sequence

SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("span_starts", pa.list_(pa.int32())),
        ("span_ends", pa.list_(pa.int32())),
        ("session_id", pa.string()),
        ("group", pa.string()),
        ("repo", pa.string()),
        ("agent", pa.string()),
        ("language", pa.string()),
        ("call_ids", pa.list_(pa.string())),
        ("split", pa.string()),
    ]
)


def group_key(ex: CallExample) -> str:
    """What the held-out split hashes: the repository, else the session, else the call."""
    if ex.repo:
        return f"repo:{ex.repo}"
    if ex.session_id:
        return f"session:{ex.session_id}"
    return f"call:{ex.call_id}"


def merge_sessions(examples: Iterable[CallExample]) -> list[Sequence]:
    """One sequence per chain of calls whose prompts extend the previous call's prompt + completion."""
    by_session: dict[str, list[CallExample]] = defaultdict(list)
    for ex in examples:
        by_session[ex.session_id or f"call:{ex.call_id}"].append(ex)
    out: list[Sequence] = []
    for _, calls in sorted(by_session.items()):
        chains: list[Sequence] = []
        for ex in sorted(calls, key=lambda e: (e.started_at, e.call_id)):
            best: Sequence | None = None
            p = ex.prompt_ids
            for seq in chains:
                n = len(seq.input_ids)
                if n <= len(p) and (best is None or n > len(best.input_ids)) and p[:n] == seq.input_ids:
                    best = seq
            if best is None:
                best = Sequence([], [], [], [], ex.session_id, group_key(ex), ex.repo, ex.agent, ex.language)
                chains.append(best)
            start = len(p)
            best.loss_mask = best.loss_mask + [0] * (start - len(best.input_ids)) + list(ex.supervise)
            best.input_ids = list(p) + list(ex.completion_ids)
            best.span_starts.append(start)
            best.span_ends.append(len(best.input_ids))
            best.call_ids.append(ex.call_id)
        out.extend(chains)
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
        piece = Sequence(
            seq.input_ids[piece_start:end],
            seq.loss_mask[piece_start:end],
            [seq.span_starts[i] - piece_start for i in cur],
            [seq.span_ends[i] - piece_start for i in cur],
            seq.session_id,
            seq.group,
            seq.repo,
            seq.agent,
            seq.language,
            [seq.call_ids[i] for i in cur if i < len(seq.call_ids)],
            seq.split,
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


def _session_key(s: Sequence) -> str:
    return f"session:{s.session_id}" if s.session_id else f"calls:{','.join(s.call_ids)}"


def _unit_key(s: Sequence) -> str:
    """What the split holds out whole: the session (its id, as the export keys it), else the group."""
    return s.session_id or s.group


def _repo(s: Sequence) -> str | None:
    return s.repo or (s.group.removeprefix("repo:") if s.group.startswith("repo:") else None)


def _sequence_key(s: Sequence) -> str:
    return f"sequence:{s.session_id}:{','.join(s.call_ids)}:{len(s.input_ids)}"


def split_groups(
    seqs: list[Sequence], eval_fraction: float, hints: dict[str, str] | None = None
) -> dict[str, str]:
    """Mark each sequence's ``split`` (train / eval): the dataset's own split where its records carry one
    (an export's, per session), else `records.split`'s rule over the sessions, else (a single session)
    over the sequences. Returns how the split was made, for the report."""
    if hints and "eval" in hints.values():
        for s in seqs:  # a session's own split (an export that held out sessions), else its repository's
            s.split = hints.get(_session_key(s)) or hints.get(s.group, "train")
        by_repo: dict[str, set[str]] = {}
        for s in seqs:
            by_repo.setdefault(s.group, set()).add(s.split)
        mixed = any(len(v) > 1 for v in by_repo.values())
        return {"by": f"dataset split ({'whole sessions' if mixed else 'whole repositories'} held out)"}
    # the export's units, keyed as it keys them (a session's id), so both sides of the pipe agree
    units = {_unit_key(s): split.Unit(_unit_key(s), _repo(s), len(s.call_ids) or 1) for s in seqs}
    plan, key = split.plan(list(units.values()), eval_fraction), _unit_key
    if plan.by == "none" and eval_fraction > 0 and len(seqs) >= 2:  # one session: its sequences
        plan = split.plan([split.Unit(_sequence_key(s)) for s in seqs], eval_fraction)
        plan.by, key = "sequence", _sequence_key
    for s in seqs:
        s.split = "eval" if plan.side(key(s)) == split.TEST else "train"
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
    ``regenerated``: also train on ``source/regenerated/`` when it holds rows."""
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
    return {
        f"session:{e.session_id}" if e.session_id else group_key(e): e.split_hint
        for e in examples
        if e.split_hint
    }


def heldout_call_ids(examples: list[CallExample], eval_fraction: float) -> set[str]:
    """The recorded calls `build_from_examples` holds out at ``eval_fraction`` (same merge, same split)."""
    merged = merge_sessions(examples)
    split_groups(merged, eval_fraction, _hints(examples))
    return {cid for s in merged if s.split == "eval" for cid in s.call_ids}


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
    merged_tokens = sum(len(s.input_ids) for s in merged)
    how = split_groups(merged, eval_fraction, _hints(examples))
    dropped: Counter[str] = Counter()
    extra = attach_regenerated(resampled, merged, dropped)
    pieces = [p for s in merged + extra for p in cut(s, max_len, dropped)]
    kept = []
    for p in pieces:
        pairs = sum(1 for i in range(len(p.loss_mask) - 1) if p.loss_mask[i] and p.loss_mask[i + 1])
        if pairs < min_anchors:
            dropped["no_anchor"] += 1
            continue
        kept.append(p)
    train = [s for s in kept if s.split == "train"]
    held = [s for s in kept if s.split == "eval"]
    report: dict[str, Any] = {
        "records": rec_report.as_dict(),
        "calls": len(examples),
        "sessions": len({e.session_id or e.call_id for e in examples}),
        "merge": {
            "sequences": len(merged),
            "target_tokens_per_call": calls_tokens,
            "target_tokens_merged": merged_tokens,
            "reduction": round(calls_tokens / merged_tokens, 3) if merged_tokens else None,
        },
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
                "languages": dict(Counter(s.language for s in part)),
            }
            for name, part in (("train", train), ("eval", held))
        },
    }
    report["split"].update(how)
    if resampled:
        report["regenerated"] = regenerated_report(resampled, extra, train)
    return BuildResult(train, held, report)


def write(result: BuildResult, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", result.train), ("eval", result.eval)):
        pq.write_table(
            pa.Table.from_pylist([asdict(s) for s in part], schema=SCHEMA), out / f"{name}.parquet"
        )
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
    rows = pq.read_table(str(path)).to_pylist()
    return [Sequence(**r) for r in rows]
