"""The dataset card and its plots, made from what an export counted (factory/publish/stats.py)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from factory.publish.card_loading import CONFIGS, loading, schema_tables
from factory.publish.stats import SCHEMAS, ExportStats


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
    lines = [
        "---",
        "license: other",
        "language:",
        "- en",
        "- ko",
        "task_categories:",
        "- text-generation",
        "tags:",
        "- agents",
        "- coding-agents",
        "- speculative-decoding",
        "- dflash",
        "pretty_name: DFlash factory agent traffic",
        "configs:",
    ]
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
        split = f"`test` holds a stable ~{held_out:.0%} of *repositories* (sha256 of the name), so no repository appears in both splits."
    else:
        split = f"**{stats.split_note}.** (The rule: a stable ~{held_out:.0%} of repositories by sha256 of the name; with too few repositories for that, whole sessions by sha256 of their id.)"
    ids_tool = (
        f"each secret's token span was re-tokenized as its placeholder with the target's tokenizer (`{stats.tokenizer}`); the other ids are exact"
        if stats.tokenizer
        else "the ids were not searched (no tokenizer was given), so a call whose text had a secret lost its ids"
    )
    rehearsal = (
        "\n> **REHEARSAL — not training data.** Every call was answered by the scripted brain of a rehearsal "
        "(`make rehearse`), not by a model; `trainer train` refuses this dataset.\n"
        if stats.settings.get("rehearsal")
        else ""
    )
    return f"""{chr(10).join(_yaml(stats))}

# DFlash factory: coding-agent traffic
{rehearsal}
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
