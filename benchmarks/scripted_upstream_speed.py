"""How fast the scripted upstream's `bench-N` stream is: the "fast local upstream" of proxy_overhead.py,
which must stream far faster than the proxy relays so that the proxy, not the upstream, sets the rate.

    .venv/bin/python benchmarks/scripted_upstream_speed.py [--chunks 2000,20000,200000] [--repeats 3]

Starts `python -m tests.fakes.scripted_upstream` on loopback and reads `bench-N` Chat streams with httpx,
one at a time. Prints, per N: the best and median seconds per stream, events/s, microseconds per event,
and the per-event cost relative to the smallest N (about 1.0 when the stream's cost is linear in its
length). tests/fakes/test_scripted_server.py checks what the stream holds; this measures its speed
(the test used to require 20,000 chunks in under 10 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from tests.support import background, free_port  # noqa: E402

CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True}


def one_stream(url: str, chunks: int) -> tuple[float, int]:
    """(seconds for the whole stream, content events received)."""
    t = time.perf_counter()
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json={**CHAT, "model": f"bench-{chunks}"}, timeout=600
    ) as r:
        body = b"".join(r.iter_raw())
    took = time.perf_counter() - t
    return took, body.count(b'"content":"tok "')


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", default="2000,20000,200000", help="stream lengths (content events)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with background(["-m", "tests.fakes.scripted_upstream", "--port", str(port)], f"{url}/health"):
        one_stream(url, 100)  # warm up
        print(
            f"{'events':>8} {'best s':>8} {'median s':>9} {'events/s':>10} {'us/event':>9} {'cost ratio':>10}"
        )
        base: float | None = None
        for n in (int(x) for x in a.chunks.split(",")):
            runs = [one_stream(url, n) for _ in range(a.repeats)]
            times = [t for t, _ in runs]
            got = {k for _, k in runs}
            best = min(times)
            per_event = best / n
            base = base or per_event
            note = "" if got == {n} else f"  (received {sorted(got)} events, expected {n})"
            print(
                f"{n:>8} {best:>8.3f} {statistics.median(times):>9.3f} {n / best:>10,.0f} "
                f"{per_event * 1e6:>9.2f} {per_event / base:>10.2f}{note}"
            )


if __name__ == "__main__":
    main()
