"""N concurrent workers that claim sessions from the database and run them.

Each worker: claim (lease; the claim carries the task) → materialise the repository → ``SessionRunner.run``
→ store the result under the lease. Infrastructure failures go back to the queue with exponential
backoff. A heartbeat renews the leases of sessions in flight. Killing the process at any moment
loses nothing: its leases expire (on this host at once, on the next start) and those sessions run
again; a finished session is never claimed again. Told to stop (Ctrl-C; SIGTERM under `factory run`), it
stores what has ended and gives back the rest at once (factory/run/stopping.py)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
import zstandard
from pydantic import BaseModel, Field
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from factory.db import utcnow
from factory.run import queue
from factory.run.repocache import RepoCache
from factory.run.runner_types import InfraError, SessionOutcome, SessionRunner, SessionSpec
from factory.run.stopping import give_back
from records.atomic import write_bytes

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


class RunConfig(BaseModel):
    """How the runner claims and runs sessions (`factory run` generates its options from these fields)."""

    proxy_url: str = Field(description="The proxy as the host sees it.")
    data_dir: Path = Field(default=Path("data"), description="Transcripts and repository clones go here.")
    concurrency: int = Field(default=2, ge=1, description="Worker threads, one session each.")
    limit: int | None = Field(default=None, ge=0, description="Sessions this invocation may claim.")
    lease_s: float = Field(default=300.0, gt=0, description="Lease seconds (renewed while running).")
    max_attempts: int = Field(default=3, ge=1, description="Attempts before a session is failed.")
    backoff_s: float = Field(
        default=30.0, ge=0, description="First retry delay after an infrastructure failure."
    )
    poll_s: float = Field(default=2.0, gt=0, description="Seconds between claims when nothing is claimable.")
    wait_for_others: bool = Field(
        default=False, description="Keep polling while other workers hold sessions."
    )


@dataclass
class RunStats:
    started: float = field(default_factory=time.monotonic)
    claimed: int = 0
    done: int = 0  # finished by this process
    agent_failed: int = 0  # finished, with the agent failing (exit status != 0, timeout…)
    infra_retries: int = 0
    infra_failed: int = 0
    lost_leases: int = 0
    in_flight: set[str] = field(default_factory=set)
    recording: set[str] = field(default_factory=set)  # agent ended, result being stored: a stop waits
    # One line per session this process finished (in order), for progress off a terminal.
    finished: list[str] = field(default_factory=list)

    def rate_per_hour(self) -> float:
        hours = max(1e-9, (time.monotonic() - self.started) / 3600)
        return self.done / hours


def write_transcript(data_dir: Path, session_id: str, events: list[dict[str, object]]) -> str:
    path = data_dir / "transcripts" / session_id[:2] / f"{session_id}.jsonl.zst"
    raw = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events).encode()
    write_bytes(path, zstandard.ZstdCompressor(level=6).compress(raw))
    return str(path)


def proxy_records_written(proxy_url: str) -> int | None:
    """`dflash_proxy_records_written` from the proxy's /metrics (calls made durable)."""
    try:
        r = httpx.get(proxy_url.rstrip("/") + "/metrics", timeout=2)
        m = re.search(r"^dflash_proxy_records_written(?:\{[^}]*\})?\s+([0-9.e+]+)", r.text, re.M)
        return int(float(m.group(1))) if m else None
    except (httpx.HTTPError, ValueError):
        return None


def _stored() -> Callable[[F], F]:
    """A result is retried for a while when the database or the disk cannot take it (a restart, a full disk):
    dropping it would run the whole session again. The heartbeat renews the lease meanwhile, so no one else takes it."""
    return cast(
        Callable[[F], F],
        retry(
            retry=retry_if_exception_type((OperationalError, OSError)),
            wait=wait_exponential(multiplier=0.5, max=10),
            stop=stop_after_delay(120),
            before_sleep=lambda rs: log.warning(
                "storing a result failed (%s); retrying", rs.outcome and rs.outcome.exception()
            ),
            reraise=True,
        ),
    )


class Runner:
    def __init__(
        self,
        sessions: sessionmaker[OrmSession],
        session_runner: SessionRunner,
        cfg: RunConfig,
        *,
        repos: RepoCache | None = None,
        worker_prefix: str = "w",
        more_coming: Callable[[], bool] | None = None,
    ) -> None:
        self.sessions = sessions
        # True while sessions may still be planned (e.g. Korean ones, as their translations land): an empty
        # queue then means "poll again", not "done".
        self._more_coming = more_coming
        self.session_runner = session_runner
        self.cfg = cfg
        self.repos = repos or RepoCache(cfg.data_dir / "repos")
        self.stats = RunStats()
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._owners = [queue.owner_id(f"{worker_prefix}{i}") for i in range(cfg.concurrency)]

    # -- workers --------------------------------------------------------------------------------
    def _take_slot(self) -> bool:
        with self._lock:
            if self.cfg.limit is not None and self.stats.claimed >= self.cfg.limit:
                return False
            self.stats.claimed += 1
            return True

    def _give_slot(self) -> None:
        with self._lock:
            self.stats.claimed -= 1

    def _nothing_left(self) -> bool:
        if self._more_coming is not None and self._more_coming():
            return False
        c = queue.counts(self.sessions)
        if c.get("pending", 0):
            return False
        return not (self.cfg.wait_for_others and c.get("running", 0))

    def _worker(self, owner: str) -> None:
        while not self.stop.is_set():
            if not self._take_slot():
                return
            try:
                claimed = queue.claim(
                    self.sessions, owner, lease_s=self.cfg.lease_s, max_attempts=self.cfg.max_attempts
                )
            except SQLAlchemyError as exc:  # the database restarting or out of disk: try again shortly
                log.warning("claim failed (%s); retrying in %.0f s", type(exc).__name__, self.cfg.poll_s)
                self._give_slot()
                self.stop.wait(self.cfg.poll_s)
                continue
            if claimed is None:
                self._give_slot()
                if self._nothing_left():
                    return
                self.stop.wait(self.cfg.poll_s)
                continue
            with self._lock:
                self.stats.in_flight.add(claimed.id)
            try:
                self._run_one(claimed, owner)
            finally:
                with self._lock:
                    self.stats.in_flight.discard(claimed.id)

    def _run_one(self, c: queue.Claimed, owner: str) -> None:
        started = utcnow()
        try:
            if not c.base_commit:
                raise InfraError("issue has no base commit")
            repo_path = self.repos.get(c.repo_name, c.clone_url, c.base_commit)
            spec = SessionSpec(
                session_id=c.id,
                proxy_session_id=c.proxy_session_id,
                attempt=c.attempt,
                agent=c.agent,
                lang=c.lang,
                repo_name=c.repo_name,
                repo_path=repo_path,
                base_commit=c.base_commit,
                task=c.task,
                proxy_url=self.cfg.proxy_url,
                setup_hint=c.setup_hint,
                repo_language=c.repo_language,
                test_command=c.test_command,
            )
            outcome: SessionOutcome = self.session_runner.run(spec)
        except Exception as exc:  # every failure outside the agent's own run is infrastructure
            detail = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, InfraError):
                detail += "\n" + "".join(traceback.format_exception(exc)[-3:])
            status = _stored()(queue.retry_later)(
                self.sessions,
                c,
                owner,
                detail,
                max_attempts=self.cfg.max_attempts,
                backoff_s=self.cfg.backoff_s,
            )
            with self._lock:
                if status == "failed":
                    self.stats.infra_failed += 1
                elif status == "pending":
                    self.stats.infra_retries += 1
                else:
                    self.stats.lost_leases += 1
                self.stats.finished.append(
                    f"{c.id[:12]} {c.agent}/{c.lang} attempt {c.attempt}: infrastructure failure, "
                    f"{status or 'lease lost'}: {detail.splitlines()[0][:160]}"
                )
            log.warning("session %s attempt %d: %s -> %s", c.id, c.attempt, detail.splitlines()[0], status)
            return
        with self._lock:
            self.stats.recording.add(c.id)
        try:
            transcript = _stored()(write_transcript)(
                self.cfg.data_dir, c.proxy_session_id, outcome.transcript
            )
            ok = _stored()(queue.finish)(
                self.sessions,
                c,
                owner,
                outcome,
                transcript_path=transcript,
                started_at=started,
                finished_at=utcnow(),
            )
        finally:
            with self._lock:
                self.stats.recording.discard(c.id)
        with self._lock:
            if not ok:
                self.stats.lost_leases += 1
            else:
                self.stats.done += 1
                if outcome.error or outcome.exit_status not in (0, None):
                    self.stats.agent_failed += 1
            how = "lease lost, result dropped" if not ok else outcome.error or f"exit {outcome.exit_status}"
            self.stats.finished.append(f"{c.id[:12]} {c.agent}/{c.lang} attempt {c.attempt}: done ({how})")

    def _heartbeat(self) -> None:
        interval = max(0.5, self.cfg.lease_s / 3)
        while not self.stop.wait(interval):
            with self._lock:
                ids = list(self.stats.in_flight)
            for owner in self._owners:
                try:
                    queue.renew(self.sessions, owner, ids, lease_s=self.cfg.lease_s)
                except Exception as exc:  # the database may be briefly unreachable
                    log.warning("lease renewal failed: %s", exc)

    # -- entry ----------------------------------------------------------------------------------
    def run(self, on_tick: Callable[[Runner], None] | None = None, tick_s: float = 1.0) -> RunStats:
        reclaimed = queue.reclaim_dead_local(self.sessions)
        if reclaimed:
            log.warning("resuming %d session(s) left running by a killed runner on this host", reclaimed)
        threads = [threading.Thread(target=self._worker, args=(o,), daemon=True) for o in self._owners]
        hb = threading.Thread(target=self._heartbeat, daemon=True)
        for t in threads:
            t.start()
        hb.start()
        try:
            while any(t.is_alive() for t in threads):
                if on_tick:
                    on_tick(self)
                for t in threads:
                    t.join(timeout=tick_s / max(1, len(threads)))
        except KeyboardInterrupt:
            # Ctrl-C (or SIGTERM, under stopping.sigterm_as_interrupt): stop claiming, store what has ended and
            # give back the rest; the sandboxes are torn down as the daemon threads die with the process.
            self.stop.set()
            give_back(self.sessions, self.stats, self._lock, self._owners)
            raise
        finally:
            self.stop.set()
            hb.join(timeout=5)
        if on_tick:
            on_tick(self)
        return self.stats


def eta(remaining: int, rate_per_hour: float) -> dt.timedelta | None:
    if rate_per_hour <= 0:
        return None
    return dt.timedelta(seconds=round(remaining / rate_per_hour * 3600))
