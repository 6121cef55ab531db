"""Proxy overhead: streaming clients direct to a fast local upstream vs through the proxy, in one run.

    .venv/bin/python benchmarks/proxy_overhead.py [--levels 1,64,256] [--chunks 50] [--requests 400]

Prints, per concurrency level: added time to first byte (p50/p99), chunk throughput ratio
(proxy/direct) and records written vs calls made. The client is a minimal asyncio HTTP/1.1
client so that it, not httpx, sets the floor; all three processes share this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.dataset as ds  # noqa: E402

from tests.support import free_port, wait_http  # noqa: E402


async def one_stream(port: int, path: str, body: bytes) -> tuple[float, int]:
    """POST, return (seconds to first body byte, SSE events received)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    writer.write(head + body)
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")
    first = await reader.read(1)
    ttfb = time.perf_counter() - t0
    rest = first + await reader.read()
    writer.close()
    return ttfb, rest.count(b"\n\n")


async def run_level(port: int, prefix: str, concurrency: int, total: int, chunks: int) -> dict[str, float]:
    sem = asyncio.Semaphore(concurrency)
    ttfbs: list[float] = []
    events = 0

    async def task(i: int) -> None:
        nonlocal events
        body = json.dumps(
            {"model": f"bench-{chunks}", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        ).encode()
        async with sem:
            t, n = await one_stream(
                port, f"{prefix}-{i}/v1/chat/completions" if prefix else "/v1/chat/completions", body
            )
        ttfbs.append(t)
        events += n

    t0 = time.perf_counter()
    await asyncio.gather(*(task(i) for i in range(total)))
    wall = time.perf_counter() - t0
    ttfbs.sort()
    return {
        "p50": statistics.median(ttfbs),
        "p99": ttfbs[min(len(ttfbs) - 1, int(len(ttfbs) * 0.99))],
        "events_per_s": events / wall,
        "calls": total,
    }


def start(args: list[str], ready: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL)
    wait_http(ready, 60, proc)
    return proc


def count_records(data_dir: Path, prefix: str) -> int:
    subprocess.run([sys.executable, "-m", "proxy", "roll", "--data-dir", str(data_dir)], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    ids = ds.dataset(data_dir / "calls").to_table(columns=["session_id"]).column("session_id").to_pylist()
    return sum(1 for s in ids if s and s.startswith(prefix))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="1,64,256")
    ap.add_argument("--chunks", type=int, default=50)
    ap.add_argument("--requests", type=int, default=512, help="calls per level (at least the concurrency)")
    a = ap.parse_args()
    up_port, px_port = free_port(), free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    upstream = start(
        ["-m", "tests.fakes.scripted_upstream", "--port", str(up_port)], f"http://127.0.0.1:{up_port}/health"
    )
    proxy = start(
        ["-m", "proxy", "serve", "--upstream", f"http://127.0.0.1:{up_port}", "--port", str(px_port),
         "--data-dir", str(data_dir), "--segment-max-age-s", "1"],
        f"http://127.0.0.1:{px_port}/healthz",
    )  # fmt: skip
    print(
        f"{'streams':>7} {'ttfb p50 +ms':>13} {'ttfb p99 +ms':>13} {'direct ev/s':>12} {'proxy ev/s':>11} {'ratio':>6} {'records/calls':>14}"
    )
    try:
        for level in (int(x) for x in a.levels.split(",")):
            total = max(level, a.requests if level > 1 else a.requests // 2)
            asyncio.run(run_level(up_port, "", min(level, 8), 16, a.chunks))  # warm both paths
            direct = asyncio.run(run_level(up_port, "", level, total, a.chunks))
            prefix = f"/s/bench{level}"
            via = asyncio.run(run_level(px_port, prefix, level, total, a.chunks))
            time.sleep(1.5)  # let the proxy rotate its open segment
            records = count_records(data_dir, f"bench{level}-")
            print(
                f"{level:>7} {1000 * (via['p50'] - direct['p50']):>13.2f} {1000 * (via['p99'] - direct['p99']):>13.2f} "
                f"{direct['events_per_s']:>12.0f} {via['events_per_s']:>11.0f} "
                f"{via['events_per_s'] / direct['events_per_s']:>6.2f} {records:>7}/{total:<6}"
            )
    finally:
        proxy.terminate()
        upstream.terminate()
        proxy.wait()
        upstream.wait()


if __name__ == "__main__":
    main()
