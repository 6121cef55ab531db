"""The rehearsal's driver: the process a harvest would be. It holds the data folder, starts the scripted
brain, the proxies and the runner processes (`factory run --runner rehearsal-agent`), restarts any of them that
dies, and stops when `sessions` sessions have ended. Killed itself, its children die with it (their
parent-death signal) and the next driver reaps what is left and goes on from the queue.

    python -m factory.rehearse.driver OPTIONS_JSON      (started by `python -m factory rehearse`)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator

from rich.console import Console
from sqlalchemy.exc import OperationalError

from clikit.children import die_with_parent, free_port
from factory.db import connect, default_url, session_factory
from factory.rehearse.options import RehearseOptions
from factory.run import queue
from factory.run.ledger import Ledger
from factory.run.lifecycle import run_scope
from factory.run.runner_types import REHEARSAL
from factory.run.services import Service

ENDED = ("done", "failed")


@contextlib.contextmanager
def _tried(name: str) -> Iterator[None]:
    try:
        yield
    except (OSError, RuntimeError) as exc:  # RuntimeError: a service that did not come up
        sys.stderr.write(f"driver: starting {name} failed ({exc}); trying again\n")


def ended(counts: dict[str, int]) -> int:
    return sum(counts.get(k, 0) for k in ENDED)


class Children:
    """The brain, the proxies and the runner processes, each restarted when it dies."""

    def __init__(self, opts: RehearseOptions, db: str, ledger: Ledger) -> None:
        self.opts, self.db, self.ledger = opts, db, ledger
        self.logs = opts.data_dir / "logs"
        self.brain_port = free_port()
        self.brain: Service | None = None
        self.proxy_ports = [free_port() for _ in range(opts.proxies)]
        self.proxies: list[Service | None] = [None] * opts.proxies
        self.runners: list[subprocess.Popen[bytes] | None] = [None] * opts.runners
        self.restarts = {"proxy": 0, "runner": 0}

    def start_brain(self) -> None:
        argv = [sys.executable, "-m", "rehearsal", "serve", "--port", str(self.brain_port)]
        argv += ["--seed", str(self.opts.seed), "--latency-scale", str(self.opts.latency_scale)]
        argv += ["--turns-median", str(self.opts.turns_median)]
        self.brain = Service(
            "brain", argv, f"http://127.0.0.1:{self.brain_port}/health", self.logs, self.ledger
        )
        self.brain.start(timeout_s=60)

    def _proxy(self, i: int) -> Service:
        port = self.proxy_ports[i]
        argv = [sys.executable, "-m", "proxy", "serve", "--upstream", f"http://127.0.0.1:{self.brain_port}"]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--data-dir", str(self.opts.data_dir)]
        argv += ["--upstream-api", "chat"]
        svc = Service(f"proxy-{i}", argv, f"http://127.0.0.1:{port}/healthz", self.logs, self.ledger)
        svc.start(timeout_s=120)
        return svc

    def _runner(self, i: int, limit: int) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "factory", "run", "--runner", REHEARSAL, "--model", "scripted-brain"]
        argv += ["--proxy-url", f"http://127.0.0.1:{self.proxy_ports[i % len(self.proxy_ports)]}"]
        argv += [
            "--data-dir",
            str(self.opts.data_dir),
            "--db",
            self.db,
            "--concurrency",
            str(self.opts.workers),
        ]
        argv += ["--limit", str(limit), "--lease", str(self.opts.lease_s), "--backoff", "2"]
        env = {**os.environ, "DFLASH_REHEARSAL_ACK_LOG": str(self.opts.report_dir / "acks")}
        with (self.logs / f"runner-{i}.log").open("ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=die_with_parent(),
            )
        with contextlib.suppress(
            OSError
        ):  # a full disk: its parent-death signal still ends it with the driver
            self.ledger.add_process(f"runner-{i}", proc.pid)
        return proc

    def keep_up(self, left: int) -> None:
        """Restart what died: proxies always, runners while sessions are left to run. A start that fails (a full
        disk refuses its log file) is tried again on the next round instead of ending the driver."""
        for i, svc in enumerate(self.proxies):
            if svc is None or (svc.proc is not None and svc.proc.poll() is not None):
                with _tried(f"proxy-{i}"):
                    self.proxies[i] = self._proxy(i)
                    self.restarts["proxy"] += svc is not None
        per_runner = math.ceil(left / len(self.runners))
        for i, proc in enumerate(self.runners):
            if (proc is None or proc.poll() is not None) and left > 0:
                with _tried(f"runner-{i}"):
                    self.runners[i] = self._runner(i, per_runner)
                    self.restarts["runner"] += proc is not None and proc.returncode != 0

    def runners_alive(self) -> bool:
        return any(p is not None and p.poll() is None for p in self.runners)

    def stop(self) -> None:
        for p in self.runners:
            if p is not None and p.poll() is None:
                p.terminate()
        for p in self.runners:
            if p is not None:
                p.wait(60)
        for svc in [*self.proxies, self.brain]:
            if svc is not None:
                svc.stop()


def drive(opts: RehearseOptions) -> dict[str, object]:
    console = Console(stderr=True)
    db = opts.db or default_url(opts.data_dir)
    sessions = session_factory(connect(db))
    status = opts.report_dir / "driver.jsonl"
    with run_scope(opts.data_dir, console, sandboxes=False) as ledger:
        ledger.set_spool(opts.data_dir / "spool")
        kids = Children(opts, db, ledger)
        try:
            kids.start_brain()
            while True:
                try:
                    counts = queue.counts(sessions)
                    # a killed runner's sessions stay `running` until a runner reclaims them: not in flight
                    live = counts.get("running", 0) - len(queue.dead_local_leases(sessions))
                except OperationalError as exc:  # the database restarting: its children carry on meanwhile
                    sys.stderr.write(
                        f"driver: the queue did not answer ({type(exc).__name__}); asking again\n"
                    )
                    time.sleep(1.0)
                    continue
                left = opts.sessions - ended(counts) - live
                if ended(counts) >= opts.sessions and not kids.runners_alive():
                    break
                kids.keep_up(left)
                with contextlib.suppress(OSError), status.open("a") as fh:  # a full disk: no line, no end
                    fh.write(
                        json.dumps({"t": time.time(), "counts": counts, "restarts": kids.restarts}) + "\n"
                    )
                time.sleep(1.0)
        finally:
            kids.stop()
    return {"restarts": kids.restarts}


def main() -> None:
    opts = RehearseOptions.model_validate_json(sys.argv[1])
    opts.report_dir.mkdir(parents=True, exist_ok=True)
    sys.stdout.write(json.dumps(drive(opts)) + "\n")


if __name__ == "__main__":
    main()
