"""Export the dataset in the Hugging Face Hub layout.

    OUT/README.md                                  dataset card (YAML `configs`, model, agents, cleaning, loading)
    OUT/data/calls/<split>-00000-of-0000N.parquet  one row per model call, joined with its session
    OUT/data/sessions/<split>-…parquet             one row per session: outcome, patch, totals
    OUT/plots/*.png, OUT/stats.json

Calls stream from the proxy's Parquet parts in small batches and leave as Arrow record batches of
byte-sized shards (factory/publish/shards.py); what stays in memory is one batch, the duplicate filter's
16-byte hashes, and one request text and prompt per open session (factory/publish/incremental.py). Only
calls of each session's final attempt are kept (``/s/{session}-a{attempt}``), never translation calls;
exact duplicates are dropped; secrets are scrubbed from the text and from the token ids (the ids are kept:
factory/publish/redact_ids.py). Output is written to a hidden sibling folder and renamed into place, so
an interrupted export leaves the previous dataset and is simply run again; the same input gives the same
files, byte for byte. docs/dataset.md describes every column."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy import update
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Session
from factory.publish.card import card, plots
from factory.publish.chat_check import ChatCheck
from factory.publish.chat_rows import ChatView
from factory.publish.incremental import SessionScrubber, scrub_call
from factory.publish.redact_ids import IdsRedactor
from factory.publish.regenerated import Sources, publishable
from factory.publish.rows import call_row, calls_per_session, dedup_key, part_files, read_calls
from factory.publish.scrub import PUBLIC_CONSTANTS, Scrubber
from factory.publish.sessions import plan_splits, session_rows
from factory.publish.stats import ExportStats, stats_json
from factory.publish.tokenizer import load_tokenizer, tokenizer_sha256
from factory.publish.trajectories import SessionTrajectories
from factory.publish.writers import Writers
from records import split
from records.io import regenerated_dir
from records.storage import calls_store
from records.tags import REHEARSAL_TAG

__all__ = ["REMEMBERED", "ExportSettings", "ExportStats", "export", "load_tokenizer", "remembered"]
log = logging.getLogger(__name__)


class ExportSettings(BaseSettings):
    """How the dataset is exported (`python -m factory export`); env vars `DFLASH_EXPORT_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="DFLASH_EXPORT_")

    held_out: float = Field(
        default=0.05, ge=0, lt=1, description="Fraction of repositories in the test split"
    )
    shard_bytes: int = Field(
        default=500_000_000, gt=0, description="A shard is closed once its file reaches this size"
    )
    rows_per_shard: int | None = Field(
        default=None, gt=0, description="Also close a shard after this many rows"
    )
    batch_rows: int = Field(default=64, gt=0, description="Calls read from the proxy's parts per batch")
    repo_id: str = Field(
        default="dflash-factory/agent-traffic", description="Hub id used in the card's examples"
    )
    tokenizer: str | None = Field(
        default=None,
        description="The target's tokenizer (a local folder or a Hub name, loaded with "
        "transformers.AutoTokenizer): secrets inside token ids are re-tokenized as their placeholder. "
        "Without it, a call whose text holds a secret loses its ids",
    )
    target_model: str | None = Field(
        default=None, description="The target model's name for the card and each row"
    )
    public_constants: list[str] = Field(
        default_factory=list, description="More strings that are never secrets (beyond the agents' own)"
    )
    chat_template: str | None = Field(
        default=None,
        description="The chat template (a jinja file) the target served with, where it is not the "
        "tokenizer's: the chat view is checked with it",
    )
    chat_check_calls: int = Field(
        default=500,
        ge=0,
        description="With a tokenizer: how many calls (sampled by id) have their published chat view rendered "
        "with its chat template and compared with their prompt ids, for the card (0: none)",
    )
    rehearsal: bool = Field(
        default=False,
        description="A rehearsal's export: the scripted brain's calls (tagged rehearsal) are merged into "
        "`sequences` too, so their build is measured; stats.json and the card mark the dataset a rehearsal "
        "and `trainer train` refuses it",
    )
    calls_url: str | None = Field(
        default=None,
        description="Read the calls from this storage URL (s3://bucket/run, gs://…; its calls/ folder) "
        "instead of DATA_DIR/calls; they are cached under DATA_DIR/store-cache first",
    )


# What a re-export of the same folder keeps unless it is given again: its split and its tokenizer (a
# re-export after `trainer regenerate` must hold out what the first one did and redact ids the same way).
REMEMBERED = ("held_out", "tokenizer", "chat_template", "target_model", "repo_id", "rehearsal")


def remembered(out_dir: Path) -> dict[str, Any]:
    """The REMEMBERED settings of the export already at `out_dir` (none: {})."""
    stats = out_dir / "stats.json"
    if not stats.is_file():
        return {}
    saved = json.loads(stats.read_text()).get("settings") or {}
    return {k: saved[k] for k in REMEMBERED if k in saved}


def _calls_dir(data_dir: Path, calls_url: str | None) -> Path:
    """DATA_DIR/calls, or a local cache of the calls at `calls_url` (only new or changed parts fetched)."""
    if not calls_url:
        return data_dir / "calls"
    cache = data_dir / "store-cache" / "calls"
    calls_store(calls_url).mirror(cache)
    return cache


def export(
    sessions: sessionmaker[OrmSession],
    data_dir: Path,
    out_dir: Path,
    settings: ExportSettings | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    **overrides: Any,
) -> ExportStats:
    """Write the `calls` and `sessions` configs of `data_dir`'s finished sessions to `out_dir`.

    `progress` gets one plain line every 10,000 calls read and one per stage (a CLI echoes them; they read
    the same on a terminal and in a log)."""
    say = progress or (lambda line: log.info("%s", line))
    cfg = ExportSettings(**{**(settings or ExportSettings()).model_dump(), **overrides})
    stats = ExportStats()
    files = part_files(_calls_dir(data_dir, cfg.calls_url))
    per_proxy = calls_per_session(files)
    by_proxy = session_rows(sessions)
    calls_of = {s["session_id"]: per_proxy.get(k, 0) for k, s in by_proxy.items()}
    plan = plan_splits(list(by_proxy.values()), calls_of, cfg.held_out)
    stats.split_by, stats.split_note = plan.by, plan.note
    stats.settings = {k: getattr(cfg, k) for k in REMEMBERED}
    if cfg.chat_template:  # a re-export from another folder finds it
        stats.settings["chat_template"] = str(Path(cfg.chat_template).resolve())
    scrubber = Scrubber([*PUBLIC_CONSTANTS, *cfg.public_constants])
    redactor = IdsRedactor(load_tokenizer(cfg.tokenizer), scrubber) if cfg.tokenizer else None
    stats.tokenizer = cfg.tokenizer
    stats.tokenizer_sha256 = tokenizer_sha256(load_tokenizer(cfg.tokenizer)) if cfg.tokenizer else None
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    writers = Writers(tmp, cfg.shard_bytes, cfg.rows_per_shard)
    state = SessionScrubber(scrubber, redactor, Counter(per_proxy))
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    say(f"export: {total:,} calls in {len(files):,} parts, {len(by_proxy):,} sessions; held out by {plan.by}")
    sources = Sources()
    tok = load_tokenizer(cfg.tokenizer) if cfg.tokenizer and cfg.chat_check_calls else None
    template = Path(cfg.chat_template).read_text() if cfg.chat_template else None
    check = ChatCheck.sampling(tok, template, total, cfg.chat_check_calls) if tok is not None else None
    _write_calls(
        _ticking(read_calls(files, cfg.batch_rows), total, say),
        by_proxy,
        plan,
        state,
        writers,
        stats,
        cfg,
        sources,
        check,
    )
    stats.chat_check = check.summary() if check is not None else None
    for seq in publishable(regenerated_dir(data_dir), sources, stats.regenerated_skipped):
        writers.sequence(seq, stats)
    call_counts = _write_sessions(by_proxy, plan, scrubber, writers, stats)
    frac = "n/a" if stats.exact_ids_fraction is None else f"{stats.exact_ids_fraction:.1%}"
    say(f"export: {stats.calls:,} calls and {stats.sessions:,} sessions written; exact ids kept on {frac}")
    stats.files = writers.close()
    (tmp / "plots").mkdir(parents=True, exist_ok=True)
    images = plots(stats, tmp / "plots")
    (tmp / "stats.json").write_text(json.dumps(stats_json(stats), indent=1, sort_keys=True) + "\n")
    (tmp / "README.md").write_text(
        card(stats, images, held_out=cfg.held_out, repo_id=cfg.repo_id),
        encoding="utf-8",
    )
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out_dir)
    # reconcile: the sessions' call counts are known only once their calls are on disk
    with sessions.begin() as s:
        for sid, n in call_counts.items():
            s.execute(update(Session).where(Session.id == sid).values(call_count=n))
    return stats


def _ticking(
    calls: Iterator[dict[str, Any]], total: int, say: Callable[[str], None]
) -> Iterator[dict[str, Any]]:
    t0 = time.monotonic()
    for n, call in enumerate(calls, 1):
        yield call
        if n % 10_000 == 0:
            say(f"export: {n:,}/{total:,} calls read, {n / (time.monotonic() - t0):,.0f} calls/s")


def _write_calls(
    calls: Any,
    by_proxy: dict[str, dict[str, Any]],
    plan: split.Plan,
    state: SessionScrubber,
    writers: Writers,
    stats: ExportStats,
    cfg: ExportSettings,
    sources: Sources,
    check: ChatCheck | None,
) -> None:
    seen: set[bytes] = set()

    def on_view(row: dict[str, Any], prompt: Any, view: ChatView) -> None:
        stats.chat_views += 1
        if check is not None:
            check(row, prompt, view)

    turns: Counter[str] = Counter()
    open_: dict[str, SessionTrajectories] = {}
    for call in calls:
        proxy_sid = call.get("session_id") or ""
        if call.get("tag") == "translation":
            stats.translation_calls_skipped += 1
            continue
        try:
            sess = by_proxy.get(proxy_sid)
            if sess is None:
                stats.stale_attempt_calls_skipped += 1
                continue
            key = dedup_key(call)
            if key in seen:
                stats.duplicates_dropped += 1
                continue
            seen.add(key)
            row = call_row(call, sess, turns[proxy_sid], cfg.target_model)
            turns[proxy_sid] += 1
            scrub_call(row, proxy_sid, state, stats)
            split = plan.sides[sess["session_id"]]
            stats.count_call(row, sess, split)
            trained = frozenset({REHEARSAL_TAG}) if cfg.rehearsal else frozenset()
            open_.setdefault(proxy_sid, SessionTrajectories(sess, on_view, trained)).add(row, call.get("tag"))
        finally:
            if proxy_sid:
                state.seen(proxy_sid)  # counts the session's calls down
                if state.remaining[proxy_sid] <= 0 and proxy_sid in open_:
                    side = plan.sides[by_proxy[proxy_sid]["session_id"]]
                    writers.emit(open_.pop(proxy_sid), side, stats, sources)
    for proxy_sid in sorted(open_):  # sessions with calls the count did not foresee
        writers.emit(open_[proxy_sid], plan.sides[by_proxy[proxy_sid]["session_id"]], stats, sources)


def _write_sessions(
    by_proxy: dict[str, dict[str, Any]],
    plan: split.Plan,
    scrubber: Scrubber,
    writers: Writers,
    stats: ExportStats,
) -> dict[str, int]:
    call_counts: dict[str, int] = {}
    for key in sorted(by_proxy, key=lambda k: by_proxy[k]["session_id"]):
        sess = by_proxy[key]
        if sess.pop("_done"):
            call_counts[sess["session_id"]] = sess["n_calls"]
        for col in ("task", "patch", "error", "baseline_tail", "after_tail"):
            sess[col], _ = scrubber.scrub(sess.get(col), stats.secrets)
        split = plan.sides[sess["session_id"]]
        writers("sessions", split).add(sess)
        stats.count_session(sess, split)
    return call_counts
