"""A bench or parity gate killed with SIGKILL takes its servers with it: each holds a model and a KV cache
(GiBs with vLLM), and orphans left by one killed gate got the next run OOM-killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.support import REPO_ROOT

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from trainer.replay.servers import BenchSettings, Server, served

    out = Path(sys.argv[1])
    s = BenchSettings(threads=1, startup_timeout=300)
    with served("standin", "tiny-qwen3", {"plain": Server("plain")}, s, out) as urls:
        print("up", flush=True)
        time.sleep(600)
    """
)


@pytest.mark.slow
def test_killed_bench_leaves_no_server(tmp_path: Path) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    servers: list[psutil.Process] = []
    try:
        assert bench.stdout is not None
        assert bench.stdout.readline().strip() == "up", (tmp_path / "server-plain.log").read_text()
        servers = psutil.Process(bench.pid).children()
        assert len(servers) == 1
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait()
        _, alive = psutil.wait_procs(servers, timeout=60)
        assert alive == [], f"the server outlived its bench: {alive}"
    finally:  # whatever failed: no server left behind by the test either
        for proc in [*psutil.Process().children(recursive=True), *servers]:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
