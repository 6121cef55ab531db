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
    if report["problems"]:
        lines += ["", "## Problems", "", *(f"- {p}" for p in report["problems"])]
    if report["errors"]:
        lines += ["", f"## Failed calls ({len(report['errors'])})", ""]
        lines += [
            f"- {e['call_id']} on {e['endpoint']} (concurrency {e['concurrency']}): {e['error']}"
            for e in report["errors"][:50]
        ]
    return "\n".join(lines) + "\n"


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
    return written
