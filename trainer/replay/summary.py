"""The report as Markdown (summary.md, and what the command prints) and as PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _f(x: Any, fmt: str = "{:.2f}", none: str = "–") -> str:
    return none if x is None else fmt.format(x)


def markdown(report: dict[str, Any]) -> str:
    sel, base = report["selection"], report["baseline"]
    engines = sorted({str(e.get("engine")) for e in report["endpoints"].values() if e.get("engine")})
    lines = [
        f"# Replay of {sel['sampled']} held-out calls ({sel['held_out_by']}; {sel['by_token_ids']} by token ids, "
        f"{sel['by_chat_fallback']} by chat) — baseline `{base}`",
        "",
        f"Served by {', '.join(engines) or 'an unnamed engine'}; MAL and acceptance from its own counters. "
        "Outputs ≠ baseline: differing / compared (near-ties of the target's top-2 in brackets).",
        "",
        "| concurrency | method | served by | MAL | acceptance at positions 1.. | tok/s per request | TTFT s "
        "| speedup | outputs ≠ baseline | failed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = report.get("notes") or {}
    for level in report["levels"]:
        for label, st in level["endpoints"].items():
            spec = st["spec"] or {}
            acc = " ".join(f"{a:.2f}" for a in spec.get("per_position_acceptance", [])[:8]) or "–"
            differ = "–" if label == base else f"{st['outputs_differ']}/{st['outputs_compared']}"
            differ += f" ({st['near_ties']})" if st.get("near_ties") else ""
            speedup = "1 (baseline)" if label == base else _f(st["speedup"], "{:.2f}×")
            who = str(report["endpoints"].get(label, {}).get("engine") or "–") + (
                " †" if label in notes else ""
            )
            lines.append(
                f"| {level['concurrency']} | {label} | {who} | {_f(spec.get('mal'))} | {acc} | {_f(st['tokens_per_s'], '{:.1f}')} "
                f"| {_f(st['mean_ttft_s'], '{:.3f}')} | {speedup} | {differ} | {st['failed']} |"
            )
    others = [label for label in report["endpoints"] if label != base]
    for level in report["levels"]:
        eps = level["endpoints"]
        groups = sorted({g for st in eps.values() for g in st["groups"]})
        if not groups or not others:
            continue
        head = " | ".join(f"{o} MAL | {o} speedup" for o in others)
        lines += [
            "",
            f"## By agent × language, concurrency {level['concurrency']}",
            "",
            f"| agent/language | calls | {base} tok/s | {head} |",
            "|---|---|---|" + "---|---|" * len(others),
        ]
        for g in groups:
            b = eps.get(base, {}).get("groups", {}).get(g, {})
            cells = []
            for o in others:
                og = eps.get(o, {}).get("groups", {}).get(g, {})
                cells += [_f(og.get("mal")), _f(og.get("speedup"), "{:.2f}×")]
            lines.append(
                f"| {g} | {b.get('calls', '–')} | {_f(b.get('tokens_per_s'), '{:.1f}')} | {' | '.join(cells)} |"
            )
    if notes:
        lines += ["", *(f"† {label}: {why}" for label, why in notes.items())]
    lines += judgement_lines(report)
    if report["problems"]:
        lines += ["", "## Problems", "", *(f"- {p}" for p in report["problems"])]
    if report["errors"]:
        lines += ["", f"## Failed calls ({len(report['errors'])})", ""]
        lines += [
            f"- {e['call_id']} on {e['endpoint']} (concurrency {e['concurrency']}): {e['error']}"
            for e in report["errors"][:50]
        ]
    return "\n".join(lines) + "\n"


def _ci(x: Any) -> str:
    return f"[{x[0]:.2f}, {x[1]:.2f}]" if x else "[–]"


def judgement_lines(report: dict[str, Any]) -> list[str]:
    """The judgement: MAL, acceptance and speedup with 95 % intervals, the paired differences, the verdict."""
    j = report.get("judgement")
    if not j:
        return []
    lines = [
        "",
        f"## Judgement: concurrency 1, {j['calls']} calls, 95 % bootstrap intervals over calls "
        f"({j['resamples']} resamples; floor {j['floor_draft_steps']} draft steps per method)",
        "",
        f"**{'Ranked' if j['ranked'] else 'Not ranked'}: {j['verdict']}.**",
    ]
    if j.get("not_judged"):
        lines += ["", f"Not judged (no replay at concurrency 1: see Problems): {', '.join(j['not_judged'])}."]
    if j["methods"]:
        head = "| method | draft steps | MAL [95 % CI] | acceptance at positions 1.. | speedup [95 % CI] |"
        lines += ["", head, "|---|---|---|---|---|"]
        for label, m in j["methods"].items():
            acc = " ".join(f"{a:.2f}" for a in m["per_position_acceptance"][:8]) or "–"
            lines.append(
                f"| {label} | {m['draft_steps']} | {_f(m['mal'])} {_ci(m['mal_ci'])} | {acc} "
                f"| {_f(m['speedup'], '{:.2f}×')} {_ci(m['speedup_ci'])} |"
            )
    if j["pairs"]:
        lines += ["", "| pair | Δ MAL (a − b) [95 % CI, paired] | verdict |", "|---|---|---|"]
        for p in j["pairs"]:
            lines.append(
                f"| {p['a']} − {p['b']} | {_f(p['mal_difference'], '{:+.2f}')} {_ci(p['ci'])} | {p['verdict']} |"
            )
    degenerate = report.get("degeneracy") or {}
    if degenerate:
        cells = [
            f"{k}: {_f(v['mean_distinct_4gram_ratio'])} / {v['max_longest_repeat_run']}"
            for k, v in degenerate.items()
        ]
        lines += ["", "Outputs' distinct-4-gram ratio / longest repeated run (tokens): " + "; ".join(cells)]
    return lines


def plot_judgement(report: dict[str, Any], out: Path) -> Path | None:
    """judgement.png: MAL with its 95 % interval by method, and within each agent and each language."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = (report.get("judgement") or {}).get("methods") or {}
    if not methods:
        return None
    keys = sorted({k for m in methods.values() for k in m["by"]})
    panels = [
        ("all calls", ["all"]),
        ("by agent", [k for k in keys if k.startswith("agent:")]),
        ("by language", [k for k in keys if k.startswith("language:")]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharey=True)
    width = 0.8 / len(methods)
    for ax, (title, groups) in zip(axes, panels, strict=True):
        for i, (label, m) in enumerate(methods.items()):
            cells = [m if g == "all" else m["by"].get(g, {}) for g in groups]
            ys = [c.get("mal") or 0 for c in cells]
            cis = [c.get("mal_ci") or (y, y) for y, c in zip(ys, cells, strict=True)]
            err = [
                [y - lo for y, (lo, _) in zip(ys, cis, strict=True)],
                [hi - y for y, (_, hi) in zip(ys, cis, strict=True)],
            ]
            ax.bar([j + i * width for j in range(len(groups))], ys, width, yerr=err, capsize=3, label=label)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], [g.split(":")[-1] for g in groups])
        ax.set_title(f"MAL, 95 % interval — {title}")
        ax.axhline(1.0, color="grey", lw=0.8)
    axes[0].legend()
    fig.tight_layout()
    path = out / "judgement.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(report: dict[str, Any], out: Path) -> list[Path]:
    """mal_speedup.png (by agent × language, per endpoint) and acceptance.png (one curve per endpoint)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = report["baseline"]
    others = [label for label in report["endpoints"] if label != base]
    written = []
    level = next(iter(report["levels"]), None)
    if level is not None and others:
        groups = sorted({g for st in level["endpoints"].values() for g in st["groups"]})
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        width = 0.8 / len(others)
        for i, label in enumerate(others):
            gs = level["endpoints"].get(label, {}).get("groups", {})
            xs = [j + i * width for j in range(len(groups))]
            axes[0].bar(xs, [gs.get(g, {}).get("mal") or 0 for g in groups], width, label=label)
            axes[1].bar(xs, [gs.get(g, {}).get("speedup") or 0 for g in groups], width, label=label)
        for ax, title in zip(axes, ("mean acceptance length", f"speedup over {base}"), strict=True):
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], groups, rotation=30, ha="right")
            ax.set_title(f"{title} (concurrency {level['concurrency']})")
            ax.legend()
        axes[1].axhline(1.0, color="grey", lw=0.8)
        fig.tight_layout()
        fig.savefig(out / "mal_speedup.png", dpi=110)
        plt.close(fig)
        written.append(out / "mal_speedup.png")
    curves = {k: v for k, v in report["spec_decode_overall"].items() if v and v["per_position_acceptance"]}
    if curves:
        fig, ax = plt.subplots(figsize=(7, 3.8))
        for label, spec in curves.items():
            acc = spec["per_position_acceptance"]
            ax.plot(range(1, len(acc) + 1), acc, marker="o", label=f"{label} (MAL {spec['mal']:.2f})")
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate")
        ax.set_ylim(0, 1)
        ax.set_title("per-position acceptance, from the servers' counters")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "acceptance.png", dpi=110)
        plt.close(fig)
        written.append(out / "acceptance.png")
    judged = plot_judgement(report, out)
    return written + ([judged] if judged else [])
