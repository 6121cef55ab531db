"""What runs on each node of a Ray cluster: the node's proxy (one per node, started on demand) and the
task that runs one session there. Imported only by `factory.run.ray_runner` (so only with `--ray`).

The node's proxy is a Ray actor pinned to its node that starts ``python -m proxy serve --store-url STORE``
on the node's own disk: the spool is the durability line (a call is acknowledged once it is fsync'd
there), and the proxy's own uploader thread moves rolled parts to ``STORE/calls/``, removing each locally
only once the store confirmed it. The proxy is configured through its environment variables and dies
with the actor (PR_SET_PDEATHSIG), so a node that is killed leaves no proxy behind; its spool and parts
stay on disk and are rolled and uploaded by the next proxy started on that host for the same store."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import ray
import zstandard

from clikit.children import die_with_parent, free_port
from factory.run.repocache import RepoCache
from factory.run.runner_types import FAKE, SANDBOX, InfraError, SessionOutcome, SessionRunner, SessionSpec
from records.storage import Store

log = logging.getLogger(__name__)
NAMESPACE = "dflash"


def run_dir(opts: dict[str, Any]) -> Path:
    """The node's folder for one store: runs that write to different stores never share a spool or a
    calls folder (an uploader sweeps its whole folder into its own store)."""
    digest = hashlib.sha1(str(opts["store_url"]).encode()).hexdigest()[:12]
    return Path(opts["node_dir"]) / f"store-{digest}"


class NodeProxy:
    """The proxy of one node, uploading to the run's store (a Ray actor: see `node_proxy`)."""

    def __init__(self, opts: dict[str, Any]) -> None:
        self.node_id = ray.get_runtime_context().get_node_id()
        self.dir = run_dir(opts)
        self.store_url, self.upstream_api = str(opts["store_url"]), str(opts["upstream_api"])
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        if opts["session_runner"] == SANDBOX:
            _reap_dead_sandboxes()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, **opts.get("env", {})}
        proxy_env = {
            "DFLASH_PROXY_UPSTREAM": opts["upstream"],
            "DFLASH_PROXY_HOST": "127.0.0.1",
            "DFLASH_PROXY_PORT": str(port),
            "DFLASH_PROXY_DATA_DIR": str(self.dir),
            "DFLASH_PROXY_UPSTREAM_API": self.upstream_api,
            "DFLASH_PROXY_SEGMENT_MAX_AGE_S": str(opts["segment_max_age_s"]),
            "DFLASH_PROXY_STORE_URL": self.store_url,
            "DFLASH_PROXY_UPLOAD_POLL_S": str(opts["upload_poll_s"]),
            "DFLASH_PROXY_UPLOAD_BACKOFF_MAX_S": str(opts["upload_backoff_max_s"]),
            "DFLASH_PROXY_UPLOAD_DRAIN_S": str(opts["upload_drain_s"]),
        }
        self.proxy = self._start(
            [sys.executable, "-m", "proxy", "serve"], {**env, **proxy_env}, f"proxy-{self.node_id[:12]}"
        )
        deadline = time.monotonic() + 120
        while True:
            if self.proxy.poll() is not None:
                raise InfraError(f"the node's proxy exited with {self.proxy.returncode}; see {self.dir}/logs")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise InfraError(f"the node's proxy did not answer within 120 s; see {self.dir}/logs")
            time.sleep(0.2)

    def _start(self, argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        with (self.dir / "logs" / f"{name}.log").open("ab") as out:
            return subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent()
            )

    def address(self) -> str:
        return self.url

    def calls_written(self) -> int | None:
        """The proxy's `dflash_proxy_records_written` (calls made durable on this node)."""
        with contextlib.suppress(httpx.HTTPError):
            for line in httpx.get(f"{self.url}/metrics", timeout=2).text.splitlines():
                if line.startswith("dflash_proxy_records_written"):
                    return int(float(line.rsplit(" ", 1)[1]))
        return None

    def stop(self, timeout_s: float = 120.0) -> int | None:
        """Stop the proxy: calls in flight get its shutdown deadline, its last segment is rolled and its
        uploader drains (within `upload_drain_s`); parts the store did not take stay for the next start.
        Returns the proxy's exit code."""
        if self.proxy.poll() is None:
            self.proxy.send_signal(signal.SIGTERM)
            try:
                self.proxy.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait()
        return self.proxy.returncode

    def report(self) -> dict[str, Any]:
        """What the stopped proxy left: the parts still in the node's folder, its log's keys in the store.
        Asked only once every proxy writing to that folder has stopped: proxies on one host share it (a
        killed driver's proxies, or nodes started on one host), so a part one of them rolls while another
        is stopping is in the folder then but uploaded by its own proxy's drain."""
        return {
            "node": self.node_id,
            "upstream_api": self.upstream_api,
            "exit": {"proxy": self.proxy.returncode},
            "parts_left": self._parts_left(),
            "logs": self._upload_logs(),
        }

    def shutdown(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """`stop` then `report`, for a proxy known to be the only one writing to its folder."""
        self.stop(timeout_s)
        return self.report()

    def _parts_left(self) -> list[str]:
        calls = self.dir / "calls"
        return sorted(p.name for p in calls.glob("*.parquet")) if calls.exists() else []

    def _upload_logs(self) -> list[str]:
        """This node's proxy log, to STORE/logs/<node>/ (best effort: it stays on disk)."""
        tag = self.node_id[:12]
        keys = []
        try:
            store = Store.from_url(self.store_url)
            for f in sorted((self.dir / "logs").glob(f"*-{tag}.log")):
                store.upload(f, f"logs/{tag}/{f.name}")
                keys.append(f"logs/{tag}/{f.name}")
        except Exception as exc:  # the logs are kept in the node dir either way
            log.warning("node logs not uploaded: %s", exc)
        return keys


def _reap_dead_sandboxes() -> None:
    """Containers left by runs that died on this host (a node that comes back) are removed."""
    try:
        import docker

        from sandboxes.gc import collect

        collect(docker.from_env())
    except Exception as exc:  # a missing engine surfaces when the session starts its sandbox
        log.warning("could not reap dead sandboxes: %s", exc)


def node_proxy(opts: dict[str, Any], name: str) -> Any:
    """This node's proxy actor, started on the first session placed here (named per node and run)."""
    node_id = ray.get_runtime_context().get_node_id()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(num_cpus=0, max_restarts=0)(NodeProxy)
    return actor_cls.options(  # type: ignore[attr-defined]
        name=f"{name}-{node_id}",
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",  # outlives the task that started it; the driver stops it at the end
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(opts)


_RUNNERS: dict[str, SessionRunner] = {}


def _session_runner(opts: dict[str, Any]) -> SessionRunner:
    """One session runner per worker process (a Docker client, an image tag), built on first use."""
    key = json.dumps(opts, sort_keys=True, default=str)
    if key not in _RUNNERS:
        if opts["session_runner"] == FAKE:
            from factory.run.fake_runner import FakeSessionRunner

            log_path = Path(opts["fake_log"]) if opts.get("fake_log") else None
            _RUNNERS[key] = FakeSessionRunner(
                calls=opts["fake_calls"], sleep_s=opts["fake_sleep_s"], log_path=log_path, model=opts["model"]
            )
        else:
            from factory.run.sandbox_runner import SandboxSessionRunner

            _RUNNERS[key] = SandboxSessionRunner(
                image=opts.get("image"), model=opts["model"], time_limit_s=opts.get("time_limit_s")
            )
    return _RUNNERS[key]


def run_session_on_node(spec: SessionSpec, opts: dict[str, Any], name: str) -> tuple[SessionOutcome, str]:
    """The Ray task: this node's proxy, the repository on this node, the session, its transcript.
    Returns the outcome and the node's id."""
    proxy = node_proxy(opts, name)
    try:
        url = ray.get(proxy.address.remote())
    except ray.exceptions.RayError as exc:
        raise InfraError(f"the node's proxy did not start: {exc}") from exc
    repo = spec.repo_path
    if not Path(repo).is_dir():  # not on this host's disk: the node clones it itself
        clone_url = f"https://github.com/{spec.repo_name}.git"
        repo = RepoCache(Path(opts["node_dir"]) / "repos").get(spec.repo_name, clone_url, spec.base_commit)
    outcome = _session_runner(opts).run(replace(spec, proxy_url=url, repo_path=Path(repo)))
    raw = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in outcome.transcript).encode()
    key = f"transcripts/{spec.proxy_session_id[:2]}/{spec.proxy_session_id}.jsonl.zst"
    try:
        Store.from_url(opts["store_url"]).write_bytes(key, zstandard.ZstdCompressor(level=6).compress(raw))
    except Exception as exc:  # the driver keeps its own copy of the transcript; the calls are safe
        log.warning("transcript %s not uploaded: %s", key, exc)
    return outcome, ray.get_runtime_context().get_node_id()
