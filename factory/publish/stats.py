"""What an export counted (`ExportStats`), and stats.json made from it; the configs' schemas by name."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from records.dataset import DATASET_CALLS_SCHEMA, SESSIONS_SCHEMA, TRAJECTORIES_SCHEMA
from records.sequences import SEQUENCES_SCHEMA

SCHEMAS = {
    "calls": DATASET_CALLS_SCHEMA,
    "trajectories": TRAJECTORIES_SCHEMA,
    "sequences": SEQUENCES_SCHEMA,
    "sessions": SESSIONS_SCHEMA,
}


@dataclass
class ExportStats:
    sessions: int = 0
    calls: int = 0
    duplicates_dropped: int = 0
    translation_calls_skipped: int = 0
    stale_attempt_calls_skipped: int = 0
    calls_with_ids: int = 0  # calls that reached the export with token ids
    calls_with_ids_kept: int = 0  # … and still have them in the dataset
    ids_redacted: int = 0  # … with a secret re-tokenized inside them
    token_ids_dropped: int = 0  # … that lost them (a secret that could not be cut out of the ids)
    secrets: Counter[str] = field(default_factory=Counter)  # in the text, per kind
    secrets_in_ids: Counter[str] = field(default_factory=Counter)
    by_split: Counter[str] = field(default_factory=Counter)  # calls
    sessions_by_split: Counter[str] = field(default_factory=Counter)
    by_cell: dict[str, dict[str, int]] = field(default_factory=dict)  # "agent/lang" -> counts
    agents: Counter[str] = field(default_factory=Counter)  # "name/version" from User-Agent -> calls
    target_models: Counter[str] = field(default_factory=Counter)
    split_by: str = "repository"
    split_note: str = ""
    tokenizer: str | None = None
    tokenizer_sha256: str | None = None  # of the tokenizer's serialized form (tokenizer.json)
    licenses: dict[str, str] = field(default_factory=dict)  # repository -> SPDX license
    trajectories: int = 0
    sequences: int = 0
    supervised_tokens: int = 0  # loss_mask ones over `sequences`
    sequences_by_source: Counter[str] = field(default_factory=Counter)  # recorded | regenerated
    regenerated_skipped: Counter[str] = field(default_factory=Counter)  # re-samples left out, by reason
    files: list[tuple[str, int]] = field(default_factory=list)  # (path, bytes)
    settings: dict[str, Any] = field(default_factory=dict)  # what a re-export keeps (REMEMBERED)
    chat_views: int = 0  # calls with a chat view
    chat_check: dict[str, Any] | None = None  # factory/publish/chat_check.py's summary

    @property
    def exact_ids_fraction(self) -> float | None:
        """Of the calls that carried token ids, the fraction that still carries them (None: there were none)."""
        return self.calls_with_ids_kept / self.calls_with_ids if self.calls_with_ids else None

    def cell(self, agent: str, lang: str) -> dict[str, int]:
        return self.by_cell.setdefault(
            f"{agent}/{lang}", {"sessions": 0, "calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        )

    def totals(self) -> dict[str, int]:
        return {
            k: sum(c[k] for c in self.by_cell.values())
            for k in ("sessions", "calls", "prompt_tokens", "completion_tokens")
        }

    def count_call(self, row: dict[str, Any], sess: dict[str, Any], split: str) -> None:
        self.calls += 1
        self.by_split[split] += 1
        sess["n_calls"] += 1
        sess["n_calls_exact_ids"] += bool(row.get("ids_exact"))
        sess["prompt_tokens"] += row.get("prompt_tokens") or 0
        sess["completion_tokens"] += row.get("completion_tokens") or 0
        if row.get("user_agent_product"):
            self.agents[f"{row['user_agent_product']}/{row.get('agent_version')}"] += 1
            sess["agent_version"] = sess["agent_version"] or row.get("agent_version")
        if row.get("target_model"):
            self.target_models[row["target_model"]] += 1
            sess["target_model"] = sess["target_model"] or row["target_model"]

    def count_session(self, sess: dict[str, Any], split: str) -> None:
        self.sessions += 1
        self.sessions_by_split[split] += 1
        if sess.get("repo"):
            self.licenses[sess["repo"]] = sess.get("repo_license") or "unknown"
        c = self.cell(sess["agent"], sess["lang"])
        c["sessions"] += 1
        for k in ("calls", "prompt_tokens", "completion_tokens"):
            c[k] += sess["n_calls" if k == "calls" else k]


def stats_json(stats: ExportStats) -> dict[str, Any]:
    return {
        "sessions": stats.sessions,
        "calls": stats.calls,
        "duplicates_dropped": stats.duplicates_dropped,
        "translation_calls_skipped": stats.translation_calls_skipped,
        "stale_attempt_calls_skipped": stats.stale_attempt_calls_skipped,
        "calls_with_ids": stats.calls_with_ids,
        "calls_with_ids_kept": stats.calls_with_ids_kept,
        "exact_ids_fraction": stats.exact_ids_fraction,
        "ids_redacted": stats.ids_redacted,
        "token_ids_dropped": stats.token_ids_dropped,
        "trajectories": stats.trajectories,
        "sequences": stats.sequences,
        "supervised_tokens": stats.supervised_tokens,
        "sequences_by_source": dict(stats.sequences_by_source),
        "regenerated_skipped": dict(stats.regenerated_skipped),
        "tokenizer": stats.tokenizer,
        "tokenizer_sha256": stats.tokenizer_sha256,
        "licenses": stats.licenses,
        "secrets_scrubbed": dict(stats.secrets),
        "secrets_in_ids": dict(stats.secrets_in_ids),
        "calls_by_split": dict(stats.by_split),
        "sessions_by_split": dict(stats.sessions_by_split),
        "split": {"by": stats.split_by, "note": stats.split_note},
        "agents": dict(stats.agents),
        "target_models": dict(stats.target_models),
        "by_agent_lang": stats.by_cell,
        "totals": stats.totals(),
        "files": dict(stats.files),
        "settings": stats.settings,
        "chat_views": stats.chat_views,
        "chat_check": stats.chat_check,
    }
