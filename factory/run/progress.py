"""The runner's progress: on a terminal a live table (done, failed, running, sessions/hour, ETA, calls
logged); off one (output piped to a file, CI, systemd, a cluster job) one plain line per finished session."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live
from rich.table import Table

from factory.run import queue
from factory.run.runner import Runner, eta, proxy_records_written


class Progress:
    def __init__(
        self,
        console: Console | None = None,
        proxy_url: str | None = None,
        every_s: float = 2.0,
        *,
        plain: bool | None = None,
    ):
        self.console = console or Console(stderr=True)
        self.proxy_url = proxy_url
        self.every_s = every_s
        self._last = 0.0
        self._live: Live | None = None
        self._calls0: int | None = None
        # A live table is invisible (or garbage) in a file: off a terminal, print plain lines instead.
        self.plain = (not self.console.is_terminal or not sys.stdout.isatty()) if plain is None else plain
        self._printed = 0

    def _line(self, runner: Runner, text: str) -> None:
        c = queue.counts(runner.sessions)
        self._say(
            f"session {text} · done {c.get('done', 0)}, failed {c.get('failed', 0)}, "
            f"pending {c.get('pending', 0)} · {runner.stats.rate_per_hour():.1f}/h"
        )

    def _say(self, line: str) -> None:
        """One plain line as it is: a session's error may hold brackets that are not markup."""
        self.console.print(line, soft_wrap=True, highlight=False, markup=False)

    def table(self, runner: Runner) -> Table:
        c = queue.counts(runner.sessions)
        st = runner.stats
        calls = proxy_records_written(self.proxy_url) if self.proxy_url else None
        if calls is not None and self._calls0 is None:
            self._calls0 = calls
        rate = st.rate_per_hour()
        pending = c.get("pending", 0)
        if runner.cfg.limit is not None:
            pending = min(pending, max(0, runner.cfg.limit - st.claimed))
        left = eta(pending + len(st.in_flight), rate)
        cells = [
            ("done", str(c.get("done", 0))),
            ("failed", str(c.get("failed", 0))),
            ("running", f"{c.get('running', 0)} ({len(st.in_flight)} here)"),
            ("pending", str(c.get("pending", 0))),
            ("sessions/h", f"{rate:.1f}"),
            ("ETA", str(left) if left is not None else "–"),
            ("calls logged", "–" if calls is None else f"{calls:,} (+{calls - (self._calls0 or 0):,})"),
            ("this run", f"{st.done} done, {st.agent_failed} agent-failed, {st.infra_retries} retries"),
        ]
        t = Table(title="dflash factory · sessions", show_header=False, box=None, pad_edge=False)
        for _ in range(2):
            t.add_column(style="bold", justify="right")
            t.add_column(justify="left")
        for i in range(0, len(cells), 2):
            (k1, v1), (k2, v2) = cells[i], cells[i + 1]
            t.add_row(k1, v1, k2, v2)
        return t

    def tick(self, runner: Runner) -> None:
        if self.plain:
            new = runner.stats.finished[self._printed :]
            self._printed += len(new)
            for text in new:
                self._line(runner, text)
            return
        now = time.monotonic()
        if self._live is None or now - self._last < self.every_s:
            return
        self._last = now
        self._live.update(self.table(runner))

    @contextmanager
    def live(self) -> Iterator[Progress]:
        if self.plain:
            yield self
            return
        with Live(console=self.console, refresh_per_second=2, transient=False) as live:
            self._live = live
            try:
                yield self
            finally:
                self._live = None

    def final(self, runner: Runner) -> None:
        if self.plain:
            self.tick(runner)  # any session finished after the last tick
            st = runner.stats
            self._say(
                f"sessions: {st.done} done ({st.agent_failed} agent-failed), {st.infra_retries} retried, "
                f"{st.infra_failed} failed by infrastructure"
            )
            return
        self.console.print(self.table(runner))
