"""vLLM CPU against the CPU stand-in on the same recorded agent calls: start time, memory, time to first
token, prompt tokens/s, decode tokens/s, and prefix-cache hits.

    .venv/bin/python benchmarks/target_engines.py --calls data/calls [--n 4] [--prompt-len 4096]

Each engine is started as `make target` / `make target-standin` start it (`python -m serving serve`,
`python -m trainer serve-target`), on a free loopback port, one at a time. Its start time is until /health
answers; its memory the peak resident set of its process group while it serves. Then the same `--n` recorded
calls (their exact prompt ids, cut to their last `--prompt-len` tokens) are sent twice each, greedy, `--decode`
tokens: the first send is cold, the second hits the prefix cache (vLLM) — what an agent's next turn costs.
Results: docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from clikit.children import free_port
from records.io import read_table
from trainer.replay.calls import ReplayError
from trainer.replay.servers import wait_healthy


class PeakRss:
    """The peak summed RSS of a process and its children, sampled every 0.5 s."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in procs if p.is_running()))

    def stop(self) -> int:
        self._stop.set()
        return self.peak


@contextlib.contextmanager
def engine(name: str, argv: list[str], log: Path) -> Iterator[tuple[str, float, PeakRss]]:
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    rss = PeakRss(proc.pid)
    url, started = f"http://127.0.0.1:{port}", time.perf_counter()
    try:
        try:
            wait_healthy(url, proc, math.inf, log)
        except ReplayError as e:
            raise SystemExit(f"{name}: {e}") from None
        yield url, time.perf_counter() - started, rss
    finally:
        rss.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def send(url: str, prompt: list[int], decode: int) -> tuple[float, float, int]:
    """(seconds to the first token, seconds in all, completion tokens) of one streamed greedy call."""
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": decode,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    started, first, n = time.perf_counter(), None, 0
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=1800) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                first = first or time.perf_counter()
                n += 1
    end = time.perf_counter()
    return (first or end) - started, end - started, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", default="data/calls", help="Recorded calls (a calls folder or a dataset).")
    ap.add_argument("--n", type=int, default=4, help="Calls replayed (the longest prompts first).")
    ap.add_argument("--prompt-len", type=int, default=4096, help="Each prompt's last tokens at most.")
    ap.add_argument("--decode", type=int, default=32, help="Tokens decoded per call.")
    ap.add_argument("--engines", default="vllm,standin", help="Which engines, in order.")
    ap.add_argument("--out", default="/tmp/target_engines", help="Where the servers' logs go.")
    ap.add_argument("--eager", action="store_true", help="vLLM without torch.compile (starts in ≈ 1 min).")
    args = ap.parse_args()
    rows = [r for r in read_table(args.calls).to_pylist() if r.get("prompt_token_ids")]
    rows.sort(key=lambda r: -len(r["prompt_token_ids"]))
    prompts = [r["prompt_token_ids"][-args.prompt_len :] for r in rows[: args.n]]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    argvs = {
        "vllm": [
            sys.executable,
            "-m",
            "serving",
            "serve",
            "--model",
            "smollm2",
            "--kv-cache-gib",
            "2",
            *(["--no-compile"] if args.eager else []),
        ],
        "standin": [
            sys.executable,
            "-m",
            "trainer",
            "serve-target",
            "--model",
            "smollm2",
            "--max-model-len",
            "32768",
            "--log-level",
            "warning",
        ],
    }
    print(
        f"{len(prompts)} calls, prompts {[len(p) for p in prompts]} tokens, {args.decode} decoded; load "
        f"{os.getloadavg()[0]:.1f} at start on {os.cpu_count()} cores"
    )
    for name in args.engines.split(","):
        with engine(name, argvs[name], out / f"{name}.log") as (url, start_s, rss):
            cold = [send(url, p, args.decode) for p in prompts]
            warm = [send(url, p, args.decode) for p in prompts]
            peak = rss.peak
        tokens = sum(len(p) for p in prompts)
        ttft_cold, ttft_warm = sum(c[0] for c in cold), sum(w[0] for w in warm)
        decode_s = sum(c[1] - c[0] for c in cold + warm)
        decoded = sum(max(c[2] - 1, 0) for c in cold + warm)
        print(
            f"{name}: start {start_s:.0f} s, peak RSS {peak / 2**30:.2f} GiB | cold: TTFT {ttft_cold / len(cold):.1f} s "
            f"mean, prompt {tokens / ttft_cold:.0f} tok/s | cached: TTFT {ttft_warm / len(warm):.2f} s mean | "
            f"decode {decoded / decode_s:.1f} tok/s | load {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
