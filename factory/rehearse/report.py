"""The rehearsal's report: per-stage throughput, memory and disk per 1,000 calls, the slowest stage, what was
lost — as JSON (DATA_DIR/report/report.json) and a plot (report.png) beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from records.atomic import write_bytes


def stages(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each stage's rate in its own unit and in calls per second (the common unit the slowest is read in)."""
    run, ledger, export = report["run"], report["ledger"], report["export"]
    calls = max(1, ledger["recorded_ok"] + ledger["recorded_other"])
    per_session = calls / max(1, ledger["sessions_finished"])
    out: dict[str, dict[str, float]] = {}
    plan = report["plan"]
    if plan["seconds"] > 0.5:
        rows = plan["repos"] + plan["issues"] + plan["translations"] + plan["sessions"]
        out["plan"] = {
            "rows_per_s": rows / plan["seconds"],
            "calls_per_s": plan["sessions"] * per_session / plan["seconds"],
        }
    if "queue_probe" in report:
        claims = report["queue_probe"]["claims_per_s"]
        out["queue (alone)"] = {"claims_per_s": claims, "calls_per_s": claims * per_session}
    seconds = max(run["seconds"], 1e-9)
    out["sessions through the proxies"] = {
        "sessions_per_s": ledger["sessions_finished"] / seconds,
        "calls_per_s": calls / seconds,
        "bytes_per_s": (ledger["request_bytes"] + ledger["response_bytes"]) / seconds,
    }
    if report.get("roll_s", 0) > 0.05:
        out["final roll"] = {"seconds": report["roll_s"]}
    if export["seconds"] > 0:
        out["export + sequence build"] = {"calls_per_s": export["calls"] / export["seconds"]}
    return out


def derive(report: dict[str, Any]) -> dict[str, Any]:
    ledger = report["ledger"]
    calls = max(1, ledger["recorded_ok"] + ledger["recorded_other"])
    st = stages(report)
    rated = {k: v["calls_per_s"] for k, v in st.items() if "calls_per_s" in v}
    disk = report["disk_bytes"]
    return {
        "stages": {k: {m: round(x, 2) for m, x in v.items()} for k, v in st.items()},
        "slowest_stage": min(rated, key=lambda k: rated[k]) if rated else None,
        # the database holds the whole plan (≈ 103k sessions) whatever ran: its size is given whole
        "disk_bytes_per_1000_calls": {
            k: round(v * 1000 / calls) for k, v in disk.items() if k != "factory.db"
        },
        "database_bytes": disk.get("factory.db"),
        "peak_rss_mib": {k: round(v / 2**20, 1) for k, v in report["run"]["peak_rss_bytes"].items()},
        "cpu_seconds_per_1000_calls": {
            k: round(v * 1000 / calls, 2) for k, v in report["run"]["cpu_seconds"].items()
        },
        "verdict": {
            "acknowledged_calls_lost": ledger["lost"],
            "sessions_completed_twice": ledger["completed_twice"],
            "sessions_unfinished": ledger["unfinished"],
        },
    }


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib  # only here: the report's plot is the one user of it in the factory, and it is slow to load

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    timeline = report["run"]["timeline"]
    if timeline:
        a.plot([t for t, _ in timeline], [n for _, n in timeline], color="tab:blue")
    for ev in report["run"]["faults"]:
        a.axvline(ev["t"], color="tab:red", alpha=0.6, linestyle="--")
        a.text(
            ev["t"], a.get_ylim()[1] * 0.95, ev["fault"], rotation=90, va="top", fontsize=8, color="tab:red"
        )
    a.set_xlabel("seconds")
    a.set_ylabel("sessions ended")
    a.set_title("progress (dashed: faults)")
    rated = {k: v["calls_per_s"] for k, v in report["derived"]["stages"].items() if "calls_per_s" in v}
    b.barh(list(rated), list(rated.values()), color="tab:green")
    b.set_xscale("log")
    b.set_xlabel("calls per second (log)")
    b.set_title("throughput by stage")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(report: dict[str, Any], folder: Path) -> Path:
    report["derived"] = derive(report)
    out = folder / "report.json"
    write_bytes(out, json.dumps(report, indent=1, default=str).encode())
    _plot(report, folder / "report.png")
    return out
