"""Sandbox cost: per-session overhead (network, create, copy repo, start, patch, teardown) and how many
sandboxes fit in the machine's memory at once.

    python benchmarks/sandbox_overhead.py [--sessions 10] [--hold 40] [--agents] [--json OUT]
    python benchmarks/sandbox_overhead.py --env [--files 50000] [--repeat 3] [--json OUT]

Needs a Docker engine (`make docker`). The agent phase runs each real CLI once against the scripted
upstream (the real target is a GPU vLLM that cannot run here) through the real proxy, for its peak memory.
Everything it creates carries the run id `bench-*` and is removed at the end, killed or not (`gc --run`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from records.agents import AGENT_NAMES  # noqa: E402
from sandboxes.config import SandboxSettings  # noqa: E402
from sandboxes.gc import collect  # noqa: E402
from sandboxes.images.build import build_agents  # noqa: E402
from sandboxes.sandbox import Sandbox, SandboxSpec  # noqa: E402
from sandboxes.session import SessionRequest, run_session  # noqa: E402
from tests.support import background, free_port  # noqa: E402

MACHINE_GIB = 24
STEPS = ("network", "create", "start", "copy_repo", "patch", "teardown")


def shim_mib(cid: str) -> float:
    """RSS of the containerd shim that holds one container: the host's own cost per container."""
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
            if args and b"containerd-shim" in args[0] and cid.encode() in args:
                rss = next(x for x in (proc / "status").read_text().splitlines() if x.startswith("VmRSS:"))
                return int(rss.split()[1]) / 1024
        except OSError:
            continue  # the process ended while we looked
    return 0.0


def container_mib(client: docker.DockerClient, cid: str) -> float:
    """Resident memory of one container's cgroup (rss + page cache, what the limit counts)."""
    stat = Path(f"/sys/fs/cgroup/memory/docker/{cid}/memory.stat")
    if stat.exists():
        fields = dict(line.split() for line in stat.read_text().splitlines())
        return (int(fields["total_rss"]) + int(fields["total_cache"])) / (1 << 20)
    return float(client.api.stats(cid, stream=False)["memory_stats"]["usage"]) / (1 << 20)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _request(
    agent: str, image: str, proxy: str, run_id: str, task: str = "", **fields: Any
) -> SessionRequest:
    """A session on this repository at its HEAD."""
    return SessionRequest(agent, REPO, "HEAD", task, proxy, image, run_id=run_id, **fields)


def overhead(client: docker.DockerClient, image: str, proxy: str, run_id: str, n: int) -> dict[str, object]:
    rows = []
    for _ in range(n):
        result = run_session(_request("command", image, proxy, run_id, command="true"), client)
        assert result.status == "succeeded", result.reason
        t = result.timings
        rows.append({**{s: t[s] for s in STEPS}, "overhead": sum(t[s] for s in STEPS)})
    return {
        k: {
            "median": round(statistics.median(r[k] for r in rows), 3),
            "p90": round(pct([r[k] for r in rows], 0.9), 3),
        }
        for k in (*STEPS, "overhead")
    }


def hold(client: docker.DockerClient, image: str, proxy: str, run_id: str, k: int) -> dict[str, float]:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        boxes = []
        for i in range(k):
            spec = SandboxSpec(run_id, f"hold-{i}", REPO, "HEAD", proxy, image, SandboxSettings())
            boxes.append(stack.enter_context(Sandbox(spec, client)))
        opened = time.monotonic() - started
        time.sleep(2)
        ids = [b.container.id for b in boxes if b.container is not None]
        per = [container_mib(client, cid) for cid in ids]
        shims = [shim_mib(cid) for cid in ids]
        subnets = len({b.net.gateway for b in boxes})
    return {
        "held": k,
        "distinct_networks": subnets,
        "open_s": round(opened, 1),
        "idle_container_mib_median": round(statistics.median(per), 1),
        "shim_mib_median": round(statistics.median(shims), 1),
        "host_mib_per_sandbox": round(statistics.median(per) + statistics.median(shims), 1),
    }


def agents(client: docker.DockerClient, image: str, proxy: str, run_id: str) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for agent in AGENT_NAMES:
        task = "Create AGENT_PROOF.txt, then say done."
        req = _request(agent, image, proxy, run_id, task, model="scripted", time_limit_s=300)
        r = run_session(req, client)
        out[agent] = {"status": r.status, "agent_s": r.timings.get("agent"), "peak_mib": r.peak_memory_mb}
    return out


def main() -> None:
    if "--env" in sys.argv[1:]:
        # Environment images vs copy-in, and env image build time/size per language (benchmarks/env_overhead.py).
        from benchmarks.env_overhead import main as env_main

        env_main([a for a in sys.argv[1:] if a != "--env"])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--hold", type=int, default=40)
    ap.add_argument("--agents", action="store_true", help="also run each real CLI once for its peak memory")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    client = docker.from_env()
    image = build_agents(client, SandboxSettings(), log=lambda s: print(s, file=sys.stderr))
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    up, px = free_port(), free_port()
    results: dict[str, object] = {
        "cpus": SandboxSettings().cpus,
        "memory_limit": SandboxSettings().memory,
        # The machine is shared: the load says how far the timings are from an idle machine's.
        "load_avg_1m_start": os.getloadavg()[0],
    }
    data_dir = tempfile.TemporaryDirectory(prefix="bench-proxy-")
    upstream_args = ["-m", "tests.fakes.scripted_upstream", "--port", str(up)]
    proxy_args = ["-m", "proxy", "serve", "--upstream", f"http://127.0.0.1:{up}", "--port", str(px)]
    held: dict[str, float] = {}
    peaks: dict[str, dict[str, object]] = {}
    try:
        with (
            background(upstream_args, f"http://127.0.0.1:{up}/health"),
            background([*proxy_args, "--data-dir", data_dir.name], f"http://127.0.0.1:{px}/healthz"),
        ):
            proxy = f"http://127.0.0.1:{px}"
            results["overhead_s"] = overhead(client, image, proxy, run_id, args.sessions)
            held = hold(client, image, proxy, run_id, args.hold)
            peaks = agents(client, image, proxy, run_id) if args.agents else {}
    finally:
        collect(client, run_id=run_id, everything=True)
        data_dir.cleanup()
    results["hold"], results["agents"] = held, peaks
    results["load_avg_1m_end"] = os.getloadavg()[0]
    # What fits in the machine's memory, leaving a tenth to the host, the proxy and dockerd: an idle sandbox
    # costs its cgroup plus its shim; a working one its agent's peak (cgroup, page cache included) plus the shim.
    budget = MACHINE_GIB * 1024 * 0.9
    fit = {"idle": int(budget // max(held["host_mib_per_sandbox"], 0.1))}
    for agent, row in peaks.items():
        if isinstance(row["peak_mib"], float):
            fit[agent] = int(budget // (row["peak_mib"] + held["shim_mib_median"]))
    results["fit_in_24GiB"] = fit
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
