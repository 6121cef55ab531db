"""What the seed's campaign would take, projected from a rehearsal's report and a real-sandbox harvest's
session breakdown (docs/factory.md, "What the seed's campaign would take").

    python benchmarks/campaign_projection.py --report DATA/report/report.json --sandbox SANDBOX.json \
        --sandbox-cpu-s 6.2 [--gpu-call-s 6] [--gpu-concurrency 256] [--turns 4.7] [--sessions 64000]

The GPU target is the parameter: `--gpu-concurrency` agent calls served at once, each taking `--gpu-call-s`
under that load. Everything else is measured: the proxy's CPU and bytes per call (the rehearsal), the queue's
claims per second on a copy of the 103k-session plan, a sandbox session's host time outside its calls and its
CPU (the sandbox harvest). The session count and turns default to the seed's (64,000 sessions, 300k turns)."""

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
    ap.add_argument(
        "--sandbox-turns", type=float, default=None, help="turns of the measured sessions (default: theirs)"
    )
    ap.add_argument("--sandbox-gib", type=float, default=1.0, help="memory to allow one sandbox (GiB)")
    ap.add_argument("--gpu-call-s", type=float, default=6.0)
    ap.add_argument("--gpu-concurrency", type=int, default=256)
    ap.add_argument("--sessions", type=int, default=64_000)
    ap.add_argument("--turns", type=float, default=300_000 / 64_000)
    ap.add_argument("--host-cores", type=int, default=32)
    ap.add_argument("--host-gib", type=float, default=128.0)
    ap.add_argument(
        "--claims-per-s", type=float, default=None, help="the queue probe's, when the report has none"
    )
    a = ap.parse_args()
    report = json.loads(a.report.read_text())
    sandbox = json.loads(a.sandbox.read_text())["sessions"]
    derived = report["derived"]
    proxy_cpu = derived["cpu_seconds_per_1000_calls"].get("proxy", 0) / 1000
    part_bytes = derived["disk_bytes_per_1000_calls"]["calls"] / 1000
    claims_ceiling = a.claims_per_s or report.get("queue_probe", {}).get("claims_per_s") or float("nan")
    fixed = statistics.mean(s["before_first_call_s"] + s["after_last_call_s"] for s in sandbox)
    between = statistics.mean(s["between_calls_s"] / max(1, s["turns"] - 1) for s in sandbox)
    measured_turns = a.sandbox_turns or statistics.mean(s["turns"] for s in sandbox)
    cpu_per_session = a.sandbox_cpu_s * (0.5 + 0.5 * a.turns / measured_turns)  # half fixed, half per turn
    wall = fixed + a.turns * (a.gpu_call_s + between)
    in_flight = (
        a.gpu_concurrency * wall / (a.turns * a.gpu_call_s)
    )  # a session is in a call this share of its time
    hours = a.sessions * wall / in_flight / 3600
    slots = math.floor(min(a.host_cores * wall / cpu_per_session, a.host_gib / a.sandbox_gib))
    hosts = math.ceil(in_flight / slots)
    calls_per_s = a.gpu_concurrency / a.gpu_call_s
    claims_per_s = in_flight / wall
    rows = [
        (
            "session wall time",
            f"{wall:.0f} s = {fixed:.1f} s fixed + {a.turns:.1f} turns × ({a.gpu_call_s:g} s GPU + {between:.2f} s host)",
        ),
        ("sessions in flight", f"{in_flight:,.0f}"),
        ("campaign duration", f"{hours:,.1f} h"),
        (
            "sandbox slots per host",
            f"{slots} ({a.host_cores} cores at {cpu_per_session:.1f} CPU-s a session; {a.host_gib:g} GiB at {a.sandbox_gib:g})",
        ),
        ("sandbox hosts", f"{hosts}"),
        (
            "proxy calls/s, in all",
            f"{calls_per_s:,.1f} → {calls_per_s * proxy_cpu:.2f} proxy cores ({proxy_cpu * 1000:.1f} CPU-s per 1,000 calls; one core ≈ {1 / proxy_cpu:,.0f} calls/s)",
        ),
        (
            "queue claims/s",
            f"{claims_per_s:.2f} of a measured {claims_ceiling:g} (2-core host) — {claims_per_s / claims_ceiling:.1%}",
        ),
        (
            "object store",
            f"{a.sessions * a.turns * part_bytes / 2**30:.1f} GiB of parts; ≤ {hosts * 60:,} part PUTs an hour (one per proxy-minute or 2,000 calls)",
        ),
    ]
    print(
        f"{a.sessions:,} sessions × {a.turns:.1f} turns; GPU: {a.gpu_concurrency} calls at once, {a.gpu_call_s:g} s each\n"
    )
    print("| quantity | projection |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
