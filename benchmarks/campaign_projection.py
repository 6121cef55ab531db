"""What the seed's campaign would take, projected from a rehearsal's report and a real-sandbox harvest's
session breakdown (docs/factory.md, "What the seed's campaign would take").

    python benchmarks/campaign_projection.py --report DATA/report/report.json --sandbox SANDBOX.json \
        [--gpu-call-s 6] [--sessions 64000] [--calls 300000] [--days 7] [--host-cores 32] [--host-gib 128]

The GPU target is a parameter (`--gpu-call-s`: seconds one agent call takes on it under the campaign's load);
everything else is measured: the proxy's CPU per call and bytes per call, the queue's claims per second on a
copy of the 103k-session plan, a sandbox session's host time outside its calls and its CPU per session."""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", type=Path, required=True)
    ap.add_argument(
        "--sandbox", type=Path, required=True, help="benchmarks/sandbox_sessions.py --json output"
    )
    ap.add_argument(
        "--sandbox-cpu-s", type=float, required=True, help="measured CPU seconds per sandbox session"
    )
    ap.add_argument("--sandbox-gib", type=float, default=1.5, help="peak memory of one sandbox (GiB)")
    ap.add_argument("--gpu-call-s", type=float, default=6.0)
    ap.add_argument("--sessions", type=int, default=64_000)
    ap.add_argument("--calls", type=int, default=300_000)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--host-cores", type=int, default=32)
    ap.add_argument("--host-gib", type=float, default=128.0)
    a = ap.parse_args()
    report = json.loads(a.report.read_text())
    sandbox = json.loads(a.sandbox.read_text())["sessions"]
    derived, ledger = report["derived"], report["ledger"]
    calls_run = ledger["recorded_ok"] + ledger["recorded_other"]
    proxy_cpu_per_call = derived["cpu_seconds_per_1000_calls"].get("proxy", 0) / 1000
    part_bytes_per_call = derived["disk_bytes_per_1000_calls"]["calls"] / 1000
    claims_ceiling = report.get("queue_probe", {}).get("claims_per_s")
    turns = a.calls / a.sessions
    # host time of a session outside its calls: before the first, between calls (per turn), after the last
    fixed = statistics.mean(s["before_first_call_s"] + s["after_last_call_s"] for s in sandbox)
    between = statistics.mean(s["between_calls_s"] / max(1, s["turns"] - 1) for s in sandbox)
    wall = fixed + turns * (a.gpu_call_s + between)
    seconds = a.days * 86400
    concurrent = a.sessions * wall / seconds
    cpu_slots = a.host_cores / (a.sandbox_cpu_s / wall)
    mem_slots = a.host_gib / a.sandbox_gib
    slots = math.floor(min(cpu_slots, mem_slots))
    hosts = math.ceil(concurrent / slots)
    calls_per_s = a.calls / seconds
    peak_calls_per_s = concurrent * turns / wall
    lease_s = report["options"]["lease_s"]
    db_writes_per_s = a.sessions / seconds * 2 + concurrent / (lease_s / 3)  # claim+finish, heartbeats
    rows = [
        (
            "session wall time (s)",
            f"{wall:.0f} = {fixed:.0f} fixed + {turns:.1f} turns × ({a.gpu_call_s:g} GPU + {between:.1f} host)",
        ),
        ("sessions in flight (average)", f"{concurrent:.0f}"),
        ("sandbox slots per host", f"{slots} (CPU allows {cpu_slots:.0f}, memory {mem_slots:.0f})"),
        ("sandbox hosts", f"{hosts}"),
        ("proxy calls/s (average, in flight)", f"{calls_per_s:.2f}, {peak_calls_per_s:.2f}"),
        (
            "proxy CPU cores needed",
            f"{peak_calls_per_s * proxy_cpu_per_call:.3f} (measured {proxy_cpu_per_call * 1000:.1f} CPU-s per 1,000 calls)",
        ),
        (
            "database writes/s (claims, results, heartbeats)",
            f"{db_writes_per_s:.2f} (claims ceiling measured: {claims_ceiling} /s)",
        ),
        (
            "object store: bytes, parts",
            f"{a.calls * part_bytes_per_call / 2**30:.1f} GiB, ≈ {math.ceil(a.calls / 2000) + hosts * a.days * 1440:.0f} PUTs (one per 2,000 calls or per proxy-minute)",
        ),
    ]
    print(
        f"campaign: {a.sessions:,} sessions, {a.calls:,} calls in {a.days:g} days; from {calls_run:,} rehearsed calls\n"
    )
    print("| quantity | projection |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
