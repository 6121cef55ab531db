"""Export the dataset in the Hugging Face Hub layout.

    OUT/README.md                                  dataset card (YAML `configs`, counts, tokens, plots)
    OUT/data/calls/<split>-00000-of-0000N.parquet  one row per model call, joined with its session
    OUT/data/sessions/<split>-…parquet             one row per session: outcome, patch, totals
    OUT/plots/*.png, OUT/stats.json

Calls are read from the proxy's Parquet parts (``DATA_DIR/calls``) in batches. Only calls of each
session's final attempt are kept (``/s/{session}-a{attempt}``), never translation calls (tag); exact
duplicates (same API, model, request and response) are dropped; secrets are scrubbed, and a call with
anything scrubbed loses its token ids (they would still spell the secret). The split is a stable hash
of the repository name, so one repository never straddles train and test."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from sqlalchemy import select, update
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Repo, Session, Translation
from factory.publish.scrub import scrub
from factory.run.tasks import build_task
from records import DATASET_CALLS_SCHEMA, SESSIONS_SCHEMA, attempt_id
from records.schema import COLUMNS as RECORD_COLUMNS

log = logging.getLogger(__name__)

CALLS_SCHEMA = DATASET_CALLS_SCHEMA
# What the export reads from the proxy's parts: the dataset's call columns that a call record has, and its tag.
_PROXY_COLUMNS = [c for c in CALLS_SCHEMA.names if c in RECORD_COLUMNS] + ["tag"]


def split_of(repo: str, held_out: float) -> str:
    """'test' for a stable `held_out` fraction of repositories, else 'train'."""
    h = int.from_bytes(hashlib.sha256(repo.lower().encode()).digest()[:8], "big") / 2**64
    return "test" if h < held_out else "train"


@dataclass
class ExportStats:
    sessions: int = 0
    calls: int = 0
    duplicates_dropped: int = 0
    translation_calls_skipped: int = 0
    stale_attempt_calls_skipped: int = 0
    token_ids_dropped: int = 0
    secrets: Counter[str] = field(default_factory=Counter)
    by_split: Counter[str] = field(default_factory=Counter)  # calls
    sessions_by_split: Counter[str] = field(default_factory=Counter)
    by_cell: dict[str, dict[str, int]] = field(default_factory=dict)  # "agent/lang" -> counts
    files: list[str] = field(default_factory=list)

    def cell(self, agent: str, lang: str) -> dict[str, int]:
        return self.by_cell.setdefault(
            f"{agent}/{lang}", {"sessions": 0, "calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        )

    def totals(self) -> dict[str, int]:
        return {
            k: sum(c[k] for c in self.by_cell.values())
            for k in ("sessions", "calls", "prompt_tokens", "completion_tokens")
        }


class _ShardWriter:
    """Rows of one config/split into shards of at most `rows_per_shard`; renamed to the Hub's
    ``<split>-xxxxx-of-xxxxx.parquet`` once the count is known."""

    def __init__(self, folder: Path, split: str, schema: pa.Schema, rows_per_shard: int) -> None:
        self.folder, self.split, self.schema, self.rows_per_shard = folder, split, schema, rows_per_shard
        self.buf: list[dict[str, Any]] = []
        self.parts: list[Path] = []

    def add(self, row: dict[str, Any]) -> None:
        self.buf.append(row)
        if len(self.buf) >= self.rows_per_shard:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f".{self.split}-{len(self.parts):05d}.tmp"
        pq.write_table(pa.Table.from_pylist(self.buf, schema=self.schema), path, compression="zstd")
        self.parts.append(path)
        self.buf = []

    def close(self) -> list[Path]:
        self.flush()
        n = len(self.parts)
        out = []
        for i, p in enumerate(self.parts):
            final = p.with_name(f"{self.split}-{i:05d}-of-{n:05d}.parquet")
            p.rename(final)
            out.append(final)
        return out


def _session_rows(sessions: sessionmaker[OrmSession]) -> dict[str, dict[str, Any]]:
    """Finished sessions keyed by the proxy session id of their final attempt."""
    out: dict[str, dict[str, Any]] = {}
    with sessions() as s:
        rows = s.execute(
            select(Session, Issue, Repo)
            .join(Issue, Session.issue_id == Issue.id)
            .join(Repo, Issue.repo_id == Repo.id)
            .where(Session.status.in_(("done", "failed")))
            .order_by(Session.priority)
        ).all()
        ko = {
            t.issue_id: t
            for t in s.scalars(
                select(Translation).where(Translation.status == "ok", Translation.lang == "ko")
            )
        }
        for sess, issue, repo in rows:
            title, body = issue.title, issue.body
            if sess.lang == "ko" and issue.id in ko:
                title, body = ko[issue.id].title or title, ko[issue.id].body or body
            task = build_task(
                lang=sess.lang,
                repo=repo.name,
                language=repo.language,
                setup_hint=repo.setup_hint,
                number=issue.number,
                title=title,
                body=body,
            )
            if sess.status == "failed":
                outcome = "infra_failed"
            elif sess.error or (sess.exit_status not in (0, None)):
                outcome = "agent_failed"
            else:
                outcome = "succeeded"
            key = sess.proxy_session_id or attempt_id(sess.id, sess.attempts)
            out[key] = {
                "session_id": sess.id,
                "repo": repo.name,
                "repo_language": repo.language,
                "repo_license": repo.license,
                "issue_number": issue.number,
                "issue_url": issue.url,
                "base_commit": issue.base_commit,
                "lang": sess.lang,
                "agent": sess.agent,
                "task": task,
                "outcome": outcome,
                "exit_status": sess.exit_status,
                "error": sess.error,
                "agent_session_id": sess.agent_session_id,
                "attempts": sess.attempts,
                "duration_s": sess.duration_s,
                "started_at": _utc(sess.started_at),
                "finished_at": _utc(sess.finished_at),
                "patch": sess.patch,
                "n_calls": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "_done": sess.status == "done",
            }
    return out


def _utc(t: dt.datetime | None) -> dt.datetime | None:
    return t.replace(tzinfo=dt.UTC) if t is not None and t.tzinfo is None else t


def _call_batches(calls_dir: Path, batch_rows: int) -> Any:
    files = sorted(p for p in calls_dir.rglob("*.parquet") if not p.name.startswith((".", "_")))
    if not files:
        return
    ds = pads.dataset([str(p) for p in files], format="parquet")
    cols = [c for c in _PROXY_COLUMNS if c in ds.schema.names]
    yield from ds.to_batches(columns=cols, batch_size=batch_rows)


def export(
    sessions: sessionmaker[OrmSession],
    data_dir: Path,
    out_dir: Path,
    *,
    held_out: float = 0.05,
    rows_per_shard: int = 20_000,
    batch_rows: int = 2_000,
    repo_id: str = "dflash-factory/agent-traffic",
) -> ExportStats:
    stats = ExportStats()
    by_proxy = _session_rows(sessions)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    writers: dict[tuple[str, str], _ShardWriter] = {}

    def writer(config: str, split: str) -> _ShardWriter:
        key = (config, split)
        if key not in writers:
            schema = CALLS_SCHEMA if config == "calls" else SESSIONS_SCHEMA
            writers[key] = _ShardWriter(tmp / "data" / config, split, schema, rows_per_shard)
        return writers[key]

    seen: set[bytes] = set()
    for batch in _call_batches(data_dir / "calls", batch_rows):
        for call in batch.to_pylist():
            if call.get("tag") == "translation":
                stats.translation_calls_skipped += 1
                continue
            sess = by_proxy.get(call.get("session_id") or "")
            if sess is None:
                stats.stale_attempt_calls_skipped += 1
                continue
            key = hashlib.blake2b(
                "\0".join(
                    str(call.get(k) or "") for k in ("api", "model", "request_json", "response_json")
                ).encode(),
                digest_size=16,
            ).digest()
            if key in seen:
                stats.duplicates_dropped += 1
                continue
            seen.add(key)
            hits = 0
            row: dict[str, Any] = {k: call.get(k) for k in CALLS_SCHEMA.names if k in call}
            for col in ("request_json", "response_json", "error"):
                row[col], n = scrub(row.get(col), stats.secrets)
                hits += n
            if hits and (
                row.get("prompt_token_ids") is not None or row.get("completion_token_ids") is not None
            ):
                row["prompt_token_ids"] = row["completion_token_ids"] = None
                row["token_ids_source"] = None
                stats.token_ids_dropped += 1
            row.update(
                session_id=sess["session_id"],
                repo=sess["repo"],
                repo_language=sess["repo_language"],
                repo_license=sess["repo_license"],
                issue_number=sess["issue_number"],
                lang=sess["lang"],
                agent=sess["agent"],
                client_agent=call.get("agent"),
            )
            split = split_of(sess["repo"], held_out)
            writer("calls", split).add(row)
            stats.calls += 1
            stats.by_split[split] += 1
            sess["n_calls"] += 1
            sess["prompt_tokens"] += call.get("prompt_tokens") or 0
            sess["completion_tokens"] += call.get("completion_tokens") or 0

    call_counts: dict[str, int] = {}
    for sess in by_proxy.values():
        done = sess.pop("_done")
        if done:
            call_counts[sess["session_id"]] = sess["n_calls"]
        for col in ("task", "patch", "error"):
            sess[col], _ = scrub(sess.get(col), stats.secrets)
        split = split_of(sess["repo"], held_out)
        writer("sessions", split).add(sess)
        stats.sessions += 1
        stats.sessions_by_split[split] += 1
        c = stats.cell(sess["agent"], sess["lang"])
        c["sessions"] += 1
        c["calls"] += sess["n_calls"]
        c["prompt_tokens"] += sess["prompt_tokens"]
        c["completion_tokens"] += sess["completion_tokens"]

    for w in writers.values():
        stats.files += [str(p.relative_to(tmp)) for p in w.close()]
    stats.files.sort()
    (tmp / "plots").mkdir(parents=True, exist_ok=True)
    plots = _plots(stats, tmp / "plots")
    (tmp / "stats.json").write_text(json.dumps(_stats_json(stats), indent=1, sort_keys=True) + "\n")
    (tmp / "README.md").write_text(card(stats, plots, held_out=held_out, repo_id=repo_id), encoding="utf-8")
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out_dir)

    # reconcile: the sessions' call counts are known only once their calls are on disk
    with sessions.begin() as s:
        for sid, n in call_counts.items():
            s.execute(update(Session).where(Session.id == sid).values(call_count=n))
    return stats


def _stats_json(stats: ExportStats) -> dict[str, Any]:
    return {
        "sessions": stats.sessions,
        "calls": stats.calls,
        "duplicates_dropped": stats.duplicates_dropped,
        "translation_calls_skipped": stats.translation_calls_skipped,
        "stale_attempt_calls_skipped": stats.stale_attempt_calls_skipped,
        "token_ids_dropped": stats.token_ids_dropped,
        "secrets_scrubbed": dict(stats.secrets),
        "calls_by_split": dict(stats.by_split),
        "sessions_by_split": dict(stats.sessions_by_split),
        "by_agent_lang": stats.by_cell,
        "totals": stats.totals(),
        "files": stats.files,
    }


def _plots(stats: ExportStats, folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted(stats.by_cell)
    if not cells:
        return []
    agents = sorted({c.split("/")[0] for c in cells})
    langs = sorted({c.split("/")[1] for c in cells})
    out = []
    for metric, title in (("calls", "Model calls"), ("completion_tokens", "Completion tokens")):
        fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
        width = 0.8 / max(1, len(langs))
        for j, lang in enumerate(langs):
            vals = [stats.by_cell.get(f"{a}/{lang}", {}).get(metric, 0) for a in agents]
            ax.bar([i + j * width for i in range(len(agents))], vals, width, label=lang)
        ax.set_xticks([i + width * (len(langs) - 1) / 2 for i in range(len(agents))], agents)
        ax.set_title(f"{title} by agent and language")
        ax.legend()
        fig.tight_layout()
        name = f"{metric}_by_agent_lang.png"
        fig.savefig(folder / name)
        plt.close(fig)
        out.append(f"plots/{name}")
    return out


def card(stats: ExportStats, plots: list[str], *, held_out: float, repo_id: str) -> str:
    splits = defaultdict(set)
    for f in stats.files:
        _, config, name = f.split("/")
        splits[config].add(name.split("-")[0])
    yaml_lines = ["---", "license: other", "language:", "- en", "- ko", "task_categories:", "- text-generation",
                  "tags:", "- agents", "- coding-agents", "- speculative-decoding", "- dflash", "pretty_name: DFlash factory agent traffic",
                  "configs:"]  # fmt: skip
    for config in ("calls", "sessions"):
        if not splits.get(config):
            continue
        yaml_lines += [f"- config_name: {config}"] + (["  default: true"] if config == "calls" else [])
        yaml_lines.append("  data_files:")
        for split in sorted(splits[config], key=lambda s: (s != "train", s)):
            yaml_lines += [f"  - split: {split}", f"    path: data/{config}/{split}-*.parquet"]
    yaml_lines.append("---")
    t = stats.totals()
    rows = "\n".join(
        f"| {cell.split('/')[0]} | {cell.split('/')[1]} | {c['sessions']:,} | {c['calls']:,} | "
        f"{c['prompt_tokens']:,} | {c['completion_tokens']:,} |"
        for cell, c in sorted(stats.by_cell.items())
    )
    secrets = ", ".join(f"{k}: {v:,}" for k, v in sorted(stats.secrets.items())) or "none found"
    images = "\n".join(f"![{Path(p).stem}]({p})" for p in plots)
    return f"""{chr(10).join(yaml_lines)}

# DFlash factory: coding-agent traffic

Real trajectories of three coding agents (Claude Code, Codex CLI, OpenCode) solving GitHub issues in
English and Korean, recorded call by call by the dflash-factory proxy. Made to train speculative-decoding
drafters (DFlash) on the target model's own agent traffic.

```python
from datasets import load_dataset
calls = load_dataset("{repo_id}", "calls")        # one row per model call
sessions = load_dataset("{repo_id}", "sessions")  # one row per agent session
```

## Contents

- **calls**: {stats.calls:,} model calls ({", ".join(f"{k}: {v:,}" for k, v in sorted(stats.by_split.items())) or "none"}),
  each with the exact request and response JSON, token usage and (where the target returned them) the
  exact prompt and completion token ids, joined with the session's repository, issue, language and agent.
- **sessions**: {stats.sessions:,} agent sessions ({", ".join(f"{k}: {v:,}" for k, v in sorted(stats.sessions_by_split.items())) or "none"}),
  with outcome, exit status, the agent's patch, and per-session call and token totals.

| agent | language | sessions | calls | prompt tokens | completion tokens |
|---|---|---:|---:|---:|---:|
{rows}
| **all** | | {t["sessions"]:,} | {t["calls"]:,} | {t["prompt_tokens"]:,} | {t["completion_tokens"]:,} |

{images}

## How it was made

Issues come from public GitHub repositories (`repos.yaml`), each checked out at its base commit (the
default branch's head when the issue was filed) in a confined sandbox; Korean tasks are validated
machine translations (or hand-written, for the bundled sample). Every model call went through a logging
proxy; only the calls of each session's final attempt are kept, translation calls are excluded.

- **Split**: `test` holds a stable ~{held_out:.0%} of *repositories* (hash of the name), so no repository
  appears in both splits.
- **Deduplication**: {stats.duplicates_dropped:,} exact duplicate calls (same API, model, request and response) removed.
- **Secret scrubbing**: API keys, tokens, private keys, passwords in URLs and e-mail addresses are replaced
  by `<REDACTED:kind>`. Found and replaced: {secrets}. {stats.token_ids_dropped:,} calls that had anything
  scrubbed lost their token ids (the ids would still spell the secret).

## License

Each row carries its repository's SPDX license (`repo_license`); the issue texts and code excerpts
remain under those licenses. The agent outputs were generated by the target model.
"""
