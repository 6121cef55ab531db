"""`python -m tests.factory.run_fake`: a runner process with the scripted session runner, for the
kill-and-resume and multi-process tests."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from factory.db import connect, session_factory
from factory.run.fake_runner import FakeSessionRunner
from factory.run.runner import RunConfig, Runner
from factory.run.stopping import sigterm_as_interrupt


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--lease", type=float, default=600.0)
    p.add_argument("--infra", default="{}", help="JSON: session id -> failing attempts")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sessions = session_factory(connect(a.db))
    fake = FakeSessionRunner(sleep_s=a.sleep, log_path=a.log, infra_failures=json.loads(a.infra))
    cfg = RunConfig(
        proxy_url="http://127.0.0.1:9",
        data_dir=a.data_dir,
        concurrency=a.concurrency,
        lease_s=a.lease,
        backoff_s=0.05,
        poll_s=0.05,
    )
    with sigterm_as_interrupt():  # as `factory run`
        try:
            stats = Runner(sessions, fake, cfg).run()
        except KeyboardInterrupt:
            print(json.dumps({"stopped": True}))
            return
    print(json.dumps({"done": stats.done, "lost": stats.lost_leases}))


if __name__ == "__main__":
    main()
