"""Move rolled Parquet parts from the local calls folder to a storage URL (records.storage).

The local spool and calls folder stay the durability boundary: a call is acknowledged once it is
fsync'd locally, the roller turns segments into parts locally, and this uploader copies each part to
``STORE/calls/<same name>``; the local part is removed only after the store confirmed the upload (the
stored size read back). An outage of the store never blocks the agents (uploads run on their own
thread) and never loses a call (the part stays until a later attempt succeeds, with backoff). A part
uploaded but not yet removed when the process dies is uploaded again under the same name: the object
is replaced by identical bytes, never duplicated.

A proxy with `--store-url` runs one on a thread of its own process (`proxy_uploader`, started and
drained by the app's lifespan); `python -m proxy.uploader` runs one as a process, for parts left in a
data dir by a proxy without a store (or by `proxy roll` after a crash)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import typer
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from tenacity import (
    Retrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from clikit import settings_command
from proxy.config import ProxySettings
from proxy.errors import ProxyError
from records.storage import Store

log = logging.getLogger(__name__)


class _Gone(ProxyError, FileNotFoundError):
    """The part left the folder meanwhile: another uploader of the same folder took it."""


@dataclass
class UploadStats:
    uploaded: int = 0  # parts confirmed and removed locally
    bytes: int = 0
    failures: int = 0  # failed attempts (each retried)
    postponed: int = 0  # sweeps ended by a part that failed every attempt (kept for the next sweep)
    last_error: str | None = None


class Uploader:
    """Uploads every finished part in `calls_dir` to `store` under `prefix`, removing it locally after."""

    def __init__(
        self,
        calls_dir: Path,
        store: Store,
        *,
        prefix: str = "calls",
        poll_s: float = 1.0,
        attempts: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        self.calls_dir, self.store, self.prefix = calls_dir, store, prefix.strip("/")
        self.poll_s, self.attempts = poll_s, attempts
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.stats = UploadStats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one sweep at a time (the thread, a final drain, a CLI)
        self._thread = threading.Thread(target=self._loop, name="part-uploader", daemon=True)
        self._pause_until = 0.0

    # -- one part -------------------------------------------------------------------------------
    def pending(self) -> list[Path]:
        """Parts waiting locally, oldest name first (hidden temporaries of a roll in progress skipped)."""
        if not self.calls_dir.is_dir():
            return []
        return sorted(
            p
            for p in self.calls_dir.rglob("*.parquet")
            if not any(part.startswith((".", "_")) for part in p.relative_to(self.calls_dir).parts)
        )

    def _put(self, part: Path, key: str) -> int:
        if not part.exists():
            raise _Gone(part)
        return self.store.upload(part, key)

    def upload_part(self, part: Path) -> int:
        """Upload one part with retries and backoff; remove it locally once confirmed. Returns bytes."""
        rel = part.relative_to(self.calls_dir).as_posix()
        key = f"{self.prefix}/{rel}" if self.prefix else rel
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff_s, max=self.backoff_max_s),
            # Any failure is the store's (network, credentials, StorageError on a size mismatch, botocore's
            # own exception classes, which do not derive from OSError): all are worth another try; a part
            # another uploader of the same folder already moved is not.
            retry=retry_if_exception_type(Exception) & retry_if_not_exception_type(_Gone),
            reraise=True,
            before_sleep=self._count_failure,
        )
        try:
            size = int(retrying(self._put, part, key))
        except _Gone:
            return 0
        part.unlink(missing_ok=True)  # only now: the store holds the same bytes under the same name
        with self._lock:
            self.stats.uploaded += 1
            self.stats.bytes += size
        return size

    def _count_failure(self, state: object) -> None:
        exc = getattr(getattr(state, "outcome", None), "exception", lambda: None)()
        with self._lock:
            self.stats.failures += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
        log.warning("upload to %s failed (%s); retrying", self.store.url, self.stats.last_error)

    # -- sweeps ---------------------------------------------------------------------------------
    def sweep(self) -> tuple[int, int]:
        """Try every pending part once (with its retries). Returns (uploaded, still pending).

        The first part that still fails ends the sweep: the store is down, and the next parts would
        only wait through the same timeouts."""
        done = 0
        for part in self.pending():
            if not part.exists():
                continue  # another sweep (another process) took it
            try:
                self.upload_part(part)
            except Exception as exc:  # kept locally; the next sweep tries again
                with self._lock:
                    self.stats.postponed += 1
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("upload of %s postponed: %s", part.name, self.stats.last_error)
                break
            done += 1
        return done, len(self.pending())

    def drain(self, timeout_s: float) -> int:
        """Sweep until nothing is pending or `timeout_s` passed; returns the parts still pending."""
        deadline = time.monotonic() + timeout_s
        while True:
            _, left = self.sweep()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(min(self.backoff_max_s, max(0.1, deadline - time.monotonic()), 1.0))

    # -- background thread ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def notify(self) -> None:
        """A part was just written: sweep now rather than at the next poll."""
        self._wake.set()

    def close(self, drain_timeout_s: float = 10.0) -> int:
        """Stop the thread after a last drain; returns the parts left locally (uploaded by a later start).

        The drain runs on a thread of its own and `drain_timeout_s` is a hard bound: a store that hangs
        (no answer rather than a refusal, where one request alone can outlast the deadline) cannot hold
        up the proxy's exit. An upload abandoned that way keeps its part locally: it is removed only once
        the store confirmed it."""
        deadline = time.monotonic() + drain_timeout_s
        self._stop.set()
        self._wake.set()

        def last() -> None:
            if self._thread.is_alive():
                self._thread.join(max(0.0, deadline - time.monotonic()))
            self.drain(max(0.0, deadline - time.monotonic()))

        final = threading.Thread(target=last, name="part-uploader-drain", daemon=True)
        final.start()
        final.join(drain_timeout_s + 1.0)  # the drain's last sleep may end a little past its deadline
        left = len(self.pending())
        if left:
            log.warning(
                "%d part(s) left in %s for a later upload to %s", left, self.calls_dir, self.store.url
            )
        return left

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._wake.wait(self.poll_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            if time.monotonic() < self._pause_until:
                continue
            _, left = self.sweep()
            # A failing store: wait longer between sweeps (exponential, capped) so an outage costs
            # little; a success resets the pace.
            failures = failures + 1 if left else 0
            if failures:
                pause = min(self.backoff_max_s, self.backoff_s * 2**failures)
                self._pause_until = time.monotonic() + pause


def proxy_uploader(settings: ProxySettings) -> Uploader | None:
    """The uploader a proxy runs in-process when it has a `store_url` (None without one). The URL is
    opened here, at start, so a bad one (or s3fs missing for s3://) stops the proxy before it serves."""
    if settings.store_url is None:
        return None
    return Uploader(
        settings.calls_dir,
        Store.from_url(settings.store_url),
        poll_s=settings.upload_poll_s,
        backoff_max_s=settings.upload_backoff_max_s,
    )


class UploaderSettings(BaseSettings):
    """`python -m proxy.uploader`: the uploader as its own process, for parts a proxy without `--store-url`
    (or a `proxy roll` after a crash) left in a data dir."""

    model_config = SettingsConfigDict(env_prefix="DFLASH_UPLOAD_", extra="ignore")

    data_dir: Path = Field(
        Path("data"), description="The proxy's data dir; parts are taken from DATA_DIR/calls."
    )
    store_url: str = Field(
        description="Where the parts go (s3://bucket/run, gs://…, a folder): STORE_URL/calls/<part>; "
        "credentials and endpoint from the environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS)."
    )
    poll_s: float = Field(1.0, gt=0, description="Seconds between looks for new parts.")
    attempts: int = Field(3, ge=1, description="Tries per part within one sweep.")
    backoff_s: float = Field(0.5, gt=0, description="First wait after a failed try (doubling).")
    backoff_max_s: float = Field(30.0, gt=0, description="Longest wait between tries and between sweeps.")
    once: bool = Field(False, description="Upload what is there and exit (non-zero if parts are left).")
    drain_s: float = Field(30.0, ge=0, description="On SIGTERM or with --once: how long to keep trying.")

    def uploader(self) -> Uploader:
        return Uploader(
            self.data_dir / "calls",
            Store.from_url(self.store_url),
            poll_s=self.poll_s,
            attempts=self.attempts,
            backoff_s=self.backoff_s,
            backoff_max_s=self.backoff_max_s,
        )


app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command()
@settings_command(UploaderSettings)
def main(settings: UploaderSettings) -> None:
    """Upload DATA_DIR/calls/*.parquet to STORE_URL/calls/, removing each part once the store confirmed it."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    up = settings.uploader()
    if settings.once:
        left = up.drain(settings.drain_s)
        typer.echo(f"uploaded {up.stats.uploaded} part(s) to {settings.store_url}; {left} left")
        raise typer.Exit(1 if left else 0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    up.start()
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    left = up.close(settings.drain_s)
    typer.echo(f"uploaded {up.stats.uploaded} part(s) to {settings.store_url}; {left} left")


if __name__ == "__main__":
    app()
