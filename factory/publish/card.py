"""What an export counted, and the dataset card, stats.json and plots made from it."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from factory.publish.card_loading import CONFIGS, loading, schema_tables
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
        "sessions": stats.sessions, "calls": stats.calls, "duplicates_dropped": stats.duplicates_dropped,
        "translation_calls_skipped": stats.translation_calls_skipped,
        "stale_attempt_calls_skipped": stats.stale_attempt_calls_skipped,
        "calls_with_ids": stats.calls_with_ids, "calls_with_ids_kept": stats.calls_with_ids_kept,
        "exact_ids_fraction": stats.exact_ids_fraction, "ids_redacted": stats.ids_redacted,
        "token_ids_dropped": stats.token_ids_dropped,
        "trajectories": stats.trajectories, "sequences": stats.sequences,
        "supervised_tokens": stats.supervised_tokens, "sequences_by_source": dict(stats.sequences_by_source),
        "regenerated_skipped": dict(stats.regenerated_skipped), "tokenizer": stats.tokenizer,
        "tokenizer_sha256": stats.tokenizer_sha256, "licenses": stats.licenses, "secrets_scrubbed": dict(stats.secrets),
        "secrets_in_ids": dict(stats.secrets_in_ids), "calls_by_split": dict(stats.by_split),
        "sessions_by_split": dict(stats.sessions_by_split), "split": {"by": stats.split_by, "note": stats.split_note},
        "agents": dict(stats.agents), "target_models": dict(stats.target_models),
        "by_agent_lang": stats.by_cell, "totals": stats.totals(), "files": dict(stats.files),
        "settings": stats.settings, "chat_views": stats.chat_views, "chat_check": stats.chat_check,
    }  # fmt: skip


def plots(stats: ExportStats, folder: Path) -> list[str]:
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
        fig.savefig(folder / name, metadata={"Software": None})  # no version stamp: same input, same bytes
        plt.close(fig)
        out.append(f"plots/{name}")
    return out


def _yaml(stats: ExportStats) -> list[str]:
    splits: dict[str, set[str]] = defaultdict(set)
    for f, _ in stats.files:
        _, config, name = f.split("/")
        splits[config].add(name.split("-")[0])
    lines = ["---", "license: other", "language:", "- en", "- ko", "task_categories:", "- text-generation",
             "tags:", "- agents", "- coding-agents", "- speculative-decoding", "- dflash",
             "pretty_name: DFlash factory agent traffic", "configs:"]  # fmt: skip
    for config in CONFIGS:
        if not splits.get(config):
            continue
        lines += [f"- config_name: {config}"] + (["  default: true"] if config == "calls" else [])
        lines.append("  data_files:")
        for split in sorted(splits[config], key=lambda s: (s != "train", s)):
            lines += [f"  - split: {split}", f"    path: data/{config}/{split}-*.parquet"]
    return [*lines, "---"]


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(c.items())) or "none"


def _chat_line(stats: ExportStats) -> str:
    out = (
        f"{stats.chat_views:,} calls carry the conversation as the target saw it, in OpenAI Chat form "
        "(`calls.chat_tail`, `trajectories.chat_messages`, `tools`), typed."
    )
    c = stats.chat_check
    if not c or not c["checked"]:
        return out + " Not checked against the prompt ids (the export had no tokenizer)."
    lo, hi = c["ci95"]
    agents = ", ".join(f"{a} {v['equal']}/{v['checked']}" for a, v in c["by_agent"].items())
    template = stats.settings.get("chat_template") or f"{stats.tokenizer}'s own"
    return out + (
        f" Rendered with the chat template the target served ({template}), the view gives back the recorded "
        f"prompt ids exactly on {c['equal']:,} of {c['checked']:,} sampled calls ({c['share']:.1%}, 95 % "
        f"interval {lo:.1%}–{hi:.1%}; {agents})."
    )


def card(stats: ExportStats, images: list[str], *, held_out: float, repo_id: str) -> str:
    t = stats.totals()
    rows = "\n".join(
        f"| {cell.split('/')[0]} | {cell.split('/')[1]} | {c['sessions']:,} | {c['calls']:,} | "
        f"{c['prompt_tokens']:,} | {c['completion_tokens']:,} |"
        for cell, c in sorted(stats.by_cell.items())
    )
    frac = stats.exact_ids_fraction
    kept = f"{frac:.1%}" if frac is not None else "n/a (no call carried ids)"
    if stats.split_by == "repository":
        split = f"`test` holds a stable ~{held_out:.0%} of *repositories* (sha256 of the name), so no repository appears in both splits."  # fmt: skip
    else:
        split = f"**{stats.split_note}.** (The rule: a stable ~{held_out:.0%} of repositories by sha256 of the name; with too few repositories for that, whole sessions by sha256 of their id.)"  # fmt: skip
    ids_tool = (f"each secret's token span was re-tokenized as its placeholder with the target's tokenizer (`{stats.tokenizer}`); the other ids are exact" if stats.tokenizer
                else "the ids were not searched (no tokenizer was given), so a call whose text had a secret lost its ids")  # fmt: skip
    return f"""{chr(10).join(_yaml(stats))}

# DFlash factory: coding-agent traffic

Real trajectories of coding agents solving GitHub issues in English and Korean, recorded call by call by
the dflash-factory proxy, to train speculative-decoding drafters (DFlash) on a target model's own traffic.

- **Target model**: {_counts(stats.target_models)} (calls per model name)
- **Tokenizer**: {_tokenizer(stats)}
- **Agents** (from each call's User-Agent, calls per version): {_counts(stats.agents)}

## Contents

- **calls**: {stats.calls:,} model calls ({_counts(stats.by_split)}): the request and response JSON,
  usage, the target's exact prompt and completion token ids where it returned them (`ids_exact`), the
  session's repository, issue, base commit, language and outcome, the agent and its version, the call's
  turn in its session and its first-byte latency.
- **trajectories**: {stats.trajectories:,} chains of calls whose prompts extend each other: the token ids
  and messages the calls' rows slice.
- **sequences**: {stats.sequences:,} training sequences ({_counts(stats.sequences_by_source)}),
  {stats.supervised_tokens:,} supervised tokens. `regenerated` rows are recorded prompts with a completion
  drawn again from the target (`python -m trainer regenerate`), on the train side only; re-samples left
  out: {_counts(stats.regenerated_skipped)}. `python -m trainer train --set data=<this folder>` trains on
  this config.
- **chat view**: {_chat_line(stats)}
- **sessions**: {stats.sessions:,} agent sessions ({_counts(stats.sessions_by_split)}): task, outcome, exit
  status, duration, the agent's patch, call and token totals.

| agent | language | sessions | calls | prompt tokens | completion tokens |
|---|---|---:|---:|---:|---:|
{rows}
| **all** | | {t["sessions"]:,} | {t["calls"]:,} | {t["prompt_tokens"]:,} | {t["completion_tokens"]:,} |

{chr(10).join(f"![{Path(p).stem}]({p})" for p in images)}

{loading(repo_id, stats.tokenizer or "<the target model>")}
## How it was made

Issues come from public GitHub repositories, each checked out at its base commit in a confined sandbox;
Korean tasks are validated machine translations. Every model call went through a logging proxy; only the
calls of each session's final attempt are kept ({stats.stale_attempt_calls_skipped:,} calls of abandoned
attempts and {stats.translation_calls_skipped:,} translation calls left out).

- **Split**: {split}
- **Deduplication**: {stats.duplicates_dropped:,} exact duplicate calls (same API, model, request and response) removed.
- **Secrets**: API keys and tokens (detect-secrets plugins and own patterns: AWS, GitHub, GitLab, npm,
  PyPI, OpenAI, Anthropic, Hugging Face, Slack, Stripe, …), private keys, passwords in URLs, secret-named
  high-entropy assignments and e-mail addresses are replaced by `<REDACTED:kind>`; the agents' own public
  constants (e.g. `noreply@anthropic.com` in Claude Code's prompt) are not secrets. Found in the text:
  {_counts(stats.secrets)}.
- **Secrets inside token ids**: {ids_tool}. Found in ids: {_counts(stats.secrets_in_ids)};
  {stats.ids_redacted:,} calls have `ids_redacted = true`.
- **Exact ids kept**: {kept} of the {stats.calls_with_ids:,} calls that carried token ids still carry them
  ({stats.token_ids_dropped:,} lost them).

{schema_tables(SCHEMAS)}
{_LIMITATIONS}
{_licenses(stats)}"""


def _tokenizer(stats: ExportStats) -> str:
    if not stats.tokenizer:
        return "not given to the export (the ids are the target's; its tokenizer was not recorded)"
    name = Path(stats.tokenizer).name or stats.tokenizer  # a local folder's name, or the Hub id
    digest = f"`{stats.tokenizer_sha256}`" if stats.tokenizer_sha256 else "n/a (not a fast tokenizer)"
    return (
        f"`{name}`, the one the token ids are in; sha256 of its `tokenizer.backend_tokenizer.to_str()` "
        f"(check yours against it): {digest}"
    )


def _licenses(stats: ExportStats) -> str:
    rows = "\n".join(f"| {repo} | {lic} |" for repo, lic in sorted(stats.licenses.items()))
    return f"""### Licenses per repository

| repository | SPDX license |
|---|---|
{rows}
"""


_LIMITATIONS = """## Limitations

- Token ids exist only where the target returned them; `ids_exact = false` marks ids rendered afterwards
  through the target's `/tokenize`, and rows with `ids_redacted = true` differ from what the model saw
  inside the redacted span.
- Secret detection is pattern- and entropy-based: it can miss a secret of an unknown shape and it
  redacts some harmless strings (e.g. e-mail addresses in code).
- The agents' behaviour depends on their versions and on the target model named above; calls of other
  targets or agent versions may differ.

## License

Each row carries its repository's SPDX license (`repo_license`); issue texts and code excerpts remain
under those licenses (table below). The agent outputs were generated by the target model.
"""
