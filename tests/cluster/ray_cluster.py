"""A real two-node Ray cluster on this machine for the tests: a head and a second node, each started
with `ray start --block` in its own process group and each declaring its own `sandbox` slots.

Ray resolves 127.0.0.1 to the host's own address, so the nodes talk over this machine's interface;
nothing leaves the machine. The object store of each node is capped (`--object-store-memory`) so two
nodes fit next to everything else on a small machine."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support import free_port

RAY = str(Path(sys.executable).with_name("ray"))
OBJECT_STORE_BYTES = 80 * 1024 * 1024
# No usage reporting, and no token authentication: a token file left in ~/.ray by any local `ray.init()`
# would otherwise switch the head to tokens that the other processes of the test do not carry.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@dataclass
class Node:
    proc: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL the node's whole process tree at once (raylet, workers, actors, their children): a
        host that dies, with no chance to clean up."""
        try:
            root = psutil.Process(self.proc.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(tree, timeout=10)
        self.proc.wait(timeout=10)

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM (`ray start --block` stops its children), then, past `grace_s` (Ray would drain for
        30 s: nothing of a test's cluster needs it), the whole tree is killed."""
        if self.proc.poll() is None:
            try:
                tree = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                tree = []
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            for p in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
            psutil.wait_procs(tree, timeout=10)


@dataclass
class RayCluster:
    root: Path
    port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> Node:
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    RAY,
                    "start",
                    "--block",
                    "--disable-usage-stats",
                    f"--object-store-memory={OBJECT_STORE_BYTES}",
                    "--num-cpus=1",
                    *args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **RAY_ENV, **env},
                start_new_session=True,
            )
        node = Node(proc, log)
        self.nodes.append(node)
        return node

    def start_head(self, sandboxes: int, env: dict[str, str] | None = None) -> Node:
        return self._start(
            "head",
            [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--temp-dir={self.root / 'tmp'}",
                f'--resources={{"sandbox": {sandboxes}}}',
            ],
            env or {},
        )

    def add_node(
        self, sandboxes: int, env: dict[str, str] | None = None, name: str = "node", **resources: int
    ) -> Node:
        """A node with `sandboxes` slots; `resources` are more custom resources (a test's handle on it)."""
        declared = json.dumps({"sandbox": sandboxes, **resources})
        return self._start(name, [f"--address={self.address}", f"--resources={declared}"], env or {})

    def wait_nodes(self, alive: int, timeout_s: float = 120) -> None:
        """Until `alive` nodes are registered and alive (asked through `ray status`-like polling)."""
        code = (
            "import ray,sys; ray.init(address=sys.argv[1], log_to_driver=False); "
            "print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        deadline = time.monotonic() + timeout_s
        seen = ""
        while time.monotonic() < deadline:
            for n in self.nodes:
                if n.proc.poll() is not None and n is self.nodes[0]:
                    raise RuntimeError(f"the head exited: {n.log.read_text()[-2000:]}")
            r = subprocess.run(
                [sys.executable, "-c", code, self.address],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, **RAY_ENV},
            )
            seen = (r.stdout.strip().splitlines() or ["?"])[-1]
            if seen == str(alive):
                return
            time.sleep(1)
        raise TimeoutError(f"{alive} Ray nodes not alive after {timeout_s}s (last seen: {seen})")

    def stop(self) -> None:
        for n in reversed(self.nodes):
            n.stop()
