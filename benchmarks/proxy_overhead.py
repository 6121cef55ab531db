"""Proxy overhead: streaming clients direct to a fast local upstream vs through the proxy, in one run.

    .venv/bin/python benchmarks/proxy_overhead.py [--levels 1,64,256] [--chunks 50] [--requests 512]
        [--transport aiohttp|httpx] [--big-chunks 5000] [--roll-events 64000]

Prints, per concurrency level: added time to first byte (p50/p99), chunk throughput ratio
(proxy/direct), the proxy's CPU per call and peak RSS, and records written vs calls made. With
`--big-chunks N` one more 256-stream level runs with N-event streams (peak RSS should not follow the
response size). Then one roll-throughput line: events/s turning one `--roll-events`-event stream into its
call record (SSE parsing + assembly + compression; should be linear in the events). The client is a
minimal asyncio HTTP/1.1 client so that it, not httpx, sets the floor; all three processes share this
machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
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


class ProcWatch:
    """CPU seconds (utime + stime) and the largest RSS of a process, sampled every 20 ms while running."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_rss, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss(self) -> int:
        return int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_rss = max(self.peak_rss, self.rss())

    def __enter__(self) -> ProcWatch:
        self.peak_rss, self.cpu0 = self.rss(), self.cpu_s()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu = self.cpu_s() - self.cpu0


def roll_throughput(events: int) -> tuple[float, float]:
    """(seconds, events/s) to turn one recorded `events`-event Chat stream into its call record."""
    import zstandard

    from proxy.parquet import to_row
    from proxy.record import Call
    from wire import Api

    chunk = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "},"token_ids":[7]}]}\n\n'
    call = Call(method="POST", path="/v1/chat/completions", api=Api.CHAT.value, upstream="u", proxy_id="p")
    call.response_content_type = "text/event-stream"
    call.response_chunks = [chunk * 512 for _ in range(events // 512)]
    t0 = time.perf_counter()
    row = to_row(call, zstandard.ZstdCompressor(level=3))
    took = time.perf_counter() - t0
    assert len(row["completion_token_ids"]) == events // 512 * 512
    return took, events / took


def start(args: list[str], ready: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL)
    wait_http(ready, 60, proc)
    return proc


def count_records(data_dir: Path, prefix: str, expected: int, wait_s: float = 180) -> int:
    """Records of this level, once the live proxy has rolled them (large streams take a while)."""
    deadline = time.monotonic() + wait_s
    while True:
        subprocess.run(
            [sys.executable, "-m", "proxy", "roll", "--data-dir", str(data_dir)],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        calls = data_dir / "calls"
        ids = (
            ds.dataset(calls).to_table(columns=["session_id"]).column("session_id").to_pylist()
            if calls.exists()
            else []
        )
        n = sum(1 for s in ids if s and s.startswith(prefix))
        if n >= expected or time.monotonic() > deadline:
            return n
        time.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="1,64,256")
    ap.add_argument("--chunks", type=int, default=50)
    ap.add_argument("--requests", type=int, default=512, help="calls per level (at least the concurrency)")
    ap.add_argument("--transport", default="aiohttp", help="the proxy's --upstream-transport")
    ap.add_argument(
        "--big-chunks", type=int, default=0, help="one more 256-stream level with N-event streams"
    )
    ap.add_argument("--roll-events", type=int, default=64_000)
    ap.add_argument("--roll-only", action="store_true", help="only the roll-throughput line")
    a = ap.parse_args()
    if a.roll_only:
        took, rate = roll_throughput(a.roll_events)
        print(
            f"roll: one {a.roll_events}-event stream assembled into its record in {took:.2f} s ({rate:,.0f} events/s)"
        )
        return
    up_port, px_port = free_port(), free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    upstream = start(
        ["-m", "tests.fakes.scripted_upstream", "--port", str(up_port)], f"http://127.0.0.1:{up_port}/health"
    )
    proxy = start(
        [
            "-m",
            "proxy",
            "serve",
            "--upstream",
            f"http://127.0.0.1:{up_port}",
            "--port",
            str(px_port),
            "--data-dir",
            str(data_dir),
            "--segment-max-age-s",
            "1",
            "--upstream-transport",
            a.transport,
        ],
        f"http://127.0.0.1:{px_port}/healthz",
    )
    print(f"transport: {a.transport}")
    print(
        f"{'streams':>7} {'events':>6} {'ttfb p50 +ms':>13} {'ttfb p99 +ms':>13} {'direct ev/s':>12} {'proxy ev/s':>11} "
        f"{'ratio':>6} {'cpu ms/call':>11} {'peak RSS MiB':>12} {'records/calls':>14}"
    )
    runs = [(int(x), a.chunks) for x in a.levels.split(",")]
    if a.big_chunks:
        runs.append((256, a.big_chunks))
    try:
        for level, chunks in runs:
            total = max(level, a.requests if level > 1 else a.requests // 2)
            if chunks > a.chunks:
                total = level  # one wave of big streams
            asyncio.run(run_level(up_port, "", min(level, 8), 16, chunks))  # warm both paths
            direct = asyncio.run(run_level(up_port, "", level, total, chunks))
            prefix = f"/s/bench{level}x{chunks}"
            with ProcWatch(proxy.pid) as watch:
                via = asyncio.run(run_level(px_port, prefix, level, total, chunks))
            time.sleep(1.5)  # let the proxy rotate its open segment
            records = count_records(data_dir, f"bench{level}x{chunks}-", total)
            print(
                f"{level:>7} {chunks:>6} {1000 * (via['p50'] - direct['p50']):>13.2f} "
                f"{1000 * (via['p99'] - direct['p99']):>13.2f} {direct['events_per_s']:>12.0f} "
                f"{via['events_per_s']:>11.0f} {via['events_per_s'] / direct['events_per_s']:>6.2f} "
                f"{1000 * watch.cpu / total:>11.2f} {watch.peak_rss / 2**20:>12.0f} {records:>7}/{total:<6}"
            )
    finally:
        proxy.terminate()
        upstream.terminate()
        proxy.wait()
        upstream.wait()
    took, rate = roll_throughput(a.roll_events)
    print(
        f"roll: one {a.roll_events}-event stream assembled into its record in {took:.2f} s ({rate:,.0f} events/s)"
    )


if __name__ == "__main__":
    main()
