"""`factory run --ray ADDRESS`: sessions spread over a Ray cluster of Docker hosts.

The driver keeps the database as the ledger of record and reuses the runner unchanged: each worker
thread claims a session under its lease, and this `SessionRunner` places the session as a Ray task on a
node with a free ``sandbox`` slot (nodes declare ``--resources='{"sandbox": N}'`` when they join). On the
node, the task runs the sandbox on the node's own Docker engine behind the node's proxy, which records
to the node's spool and uploads to the object store (`factory.run.ray_node`). Ray never retries a task
(``max_retries=0``): a node that dies fails the task, and the runner puts the session back in the queue
(attempt + 1, a new proxy session id), so it runs again elsewhere and only the final attempt's calls are
exported; a driver that dies leaves leases that expire (on this host at once, on restart).

This is the only module that imports Ray, and it is imported only when `--ray` is given."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import ray  # the optional `cluster` extra: only this module imports it, and only `--ray` imports this
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.run import ray_node
from factory.run.progress import Progress
from factory.run.runner import RunConfig, Runner, RunStats
from factory.run.runner_types import SANDBOX, InfraError, SessionOutcome, SessionSpec
from factory.run.runners import RunnerName
from wire import UpstreamApi

# The Ray custom resource a node offers per concurrent sandbox (`ray start --resources '{"sandbox": N}'`,
# docs/factory.md): a resource name, not a runner's.
SANDBOX_RESOURCE = "sandbox"

log = logging.getLogger(__name__)


class RayOptions(BaseSettings):
    """How sessions are placed on a Ray cluster and where their calls land (env vars `DFLASH_RAY_<NAME>`)."""

    model_config = SettingsConfigDict(env_prefix="DFLASH_RAY_", extra="ignore")

    address: str = Field(description="Ray cluster address: HEAD:6379, ray://HEAD:10001, or auto on a node.")
    upstream: str = Field(description="The target model's URL as every node reaches it (vLLM).")
    store_url: str = Field(
        description="Object store URL for calls and transcripts (s3://bucket/run, gs://…)."
    )
    node_dir: Path = Field(
        default=Path("/var/tmp/dflash-node"), description="Each node's local spool, parts, clones and logs."
    )
    session_runner: RunnerName = Field(
        default=SANDBOX,
        description="What a node runs per session: a Docker sandbox, or scripted calls (tests).",
    )
    upstream_api: UpstreamApi = Field(default="native", description="The node proxies' upstream API.")
    model: str = Field(default="target", description="Model id the agents ask for.")
    image: str | None = Field(
        default=None, description="Agents image on every node (default: build or find)."
    )
    time_limit_s: float | None = Field(default=None, gt=0, description="Seconds an agent may run.")
    segment_max_age_s: float = Field(
        default=10.0, gt=0, description="A node proxy rolls its spool this often."
    )
    upload_poll_s: float = Field(
        default=1.0, gt=0, description="Seconds between a node proxy's looks for parts."
    )
    upload_backoff_max_s: float = Field(
        default=30.0, gt=0, description="Longest wait between a node proxy's upload retries."
    )
    upload_drain_s: float = Field(
        default=30.0, ge=0, description="How long a node proxy's last uploads may take when it stops."
    )
    fake_calls: int = Field(default=2, ge=0, description="fake: calls per session through the node's proxy.")
    fake_sleep_s: float = Field(
        default=0.0, ge=0, description="fake: seconds a session lasts after its calls."
    )
    fake_log: str | None = Field(default=None, description="fake: JSON lines of session starts and finishes.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the node processes.")

    def node_opts(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"address"})

    def store_prefix(self) -> str:
        return f"dflash-proxy-{hashlib.sha1(self.store_url.encode()).hexdigest()[:8]}"

    def actor_prefix(self) -> str:
        """Node proxies are named by their store and what they were started with: a restarted driver
        finds the same ones; a run with other options gets its own."""
        digest = hashlib.sha1(json.dumps(self.node_opts(), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.store_prefix()}-{digest}"


class RaySessionRunner:
    """A `SessionRunner` that runs each session as a Ray task on a node with a free sandbox slot."""

    def __init__(self, opts: RayOptions) -> None:
        self.opts = opts
        if not ray.is_initialized():
            ray.init(address=opts.address, namespace=ray_node.NAMESPACE, log_to_driver=False)
        self._task = ray.remote(num_cpus=0, max_retries=0)(ray_node.run_session_on_node)
        self._lock = threading.Lock()
        self.done_by_node: Counter[str] = Counter()
        self.lost_by_node: Counter[str] = Counter()

    def slots(self) -> int:
        """Sandbox slots in the whole cluster now (the runner's concurrency)."""
        return int(ray.cluster_resources().get(SANDBOX_RESOURCE, 0))

    def run(self, spec: SessionSpec) -> SessionOutcome:
        ref = self._task.options(resources={SANDBOX_RESOURCE: 1}).remote(  # type: ignore[attr-defined]
            spec, self.opts.node_opts(), self.opts.actor_prefix()
        )
        try:
            outcome, node = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            raise InfraError(f"on a node: {type(cause).__name__}: {cause}") from exc
        except ray.exceptions.RayError as exc:  # the node or its worker died: the queue retries it
            raise InfraError(f"node lost: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from exc
        with self._lock:
            self.done_by_node[node] += 1
        return outcome  # type: ignore[no-any-return]

    def nodes(self) -> list[dict[str, Any]]:
        """One row per node: id, address, alive, sandbox slots, sessions finished here, calls recorded."""
        rows = []
        for n in ray.nodes():
            slots = int(n.get("Resources", {}).get(SANDBOX_RESOURCE, 0))
            if not slots:
                continue
            rows.append(
                {
                    "node": n["NodeID"],
                    "ip": n.get("NodeManagerAddress", "?"),
                    "alive": n["Alive"],
                    "slots": slots,
                    "done": self.done_by_node.get(n["NodeID"], 0),
                    "calls": self._calls(n["NodeID"]) if n["Alive"] else None,
                }
            )
        return rows

    def _calls(self, node_id: str) -> int | None:
        try:
            actor = ray.get_actor(f"{self.opts.actor_prefix()}-{node_id}", namespace=ray_node.NAMESPACE)
            return cast("int | None", ray.get(actor.calls_written.remote(), timeout=2))
        except (ValueError, ray.exceptions.RayError):
            return None  # no session placed there yet, or the node is going away

    def close(self, timeout_s: float = 180.0) -> list[dict[str, Any]]:
        """Stop every node proxy writing to this run's store (each rolls its spool and drains its uploads),
        those of an earlier driver of the same store started with other options included: a store is one
        run's home, and a killed driver's detached proxies would otherwise outlive it."""
        reports: list[dict[str, Any]] = []
        names = [
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == ray_node.NAMESPACE and a["name"].startswith(self.opts.store_prefix())
        ]
        actors: dict[str, Any] = {}
        for name in sorted(names):
            with contextlib.suppress(ValueError):  # gone since it was listed
                actors[name] = ray.get_actor(name, namespace=ray_node.NAMESPACE)
        # All stopped first, then asked what they left: proxies on one host share its folder.
        stops: dict[str, Any] = {name: actor.stop.remote(timeout_s) for name, actor in actors.items()}
        stopped = []
        for name, ref in stops.items():
            try:
                ray.get(ref, timeout=timeout_s + 30)
                stopped.append(name)
            except ray.exceptions.RayError as exc:  # its node died: nothing left to stop there
                log.warning("%s: proxy shutdown failed: %s", name, str(exc).splitlines()[0])
        for name in stopped:
            with contextlib.suppress(ray.exceptions.RayError):
                reports.append(cast("dict[str, Any]", ray.get(actors[name].report.remote(), timeout=60)))
        for actor in actors.values():
            with contextlib.suppress(ray.exceptions.RayError, ValueError):
                ray.kill(actor)
        return reports


class ClusterProgress(Progress):
    """The runner's table plus one row per node of the cluster."""

    def __init__(self, ray_runner: RaySessionRunner, **kw: Any) -> None:
        super().__init__(**kw)
        self.ray_runner = ray_runner

    def table(self, runner: Runner) -> Table:
        outer = Table.grid()
        outer.add_row(super().table(runner))
        nodes = Table(title="nodes", box=None, pad_edge=False)
        for col in ("node", "address", "state", "sandbox slots", "done here", "calls recorded"):
            nodes.add_column(col, justify="left" if col in ("node", "address", "state") else "right")
        for r in self.ray_runner.nodes():
            nodes.add_row(
                r["node"][:12],
                r["ip"],
                "alive" if r["alive"] else "[red]dead[/]",
                str(r["slots"]),
                str(r["done"]),
                "–" if r["calls"] is None else f"{r['calls']:,}",
            )
        outer.add_row(nodes)
        return outer

    def final(self, runner: Runner) -> None:
        super().final(runner)
        if self.plain:  # off a terminal: the node rows as plain lines too
            for r in self.ray_runner.nodes():
                calls = "–" if r["calls"] is None else f"{r['calls']:,}"
                self.console.print(
                    f"node {r['node'][:12]} {r['ip']} {'alive' if r['alive'] else 'dead'}: "
                    f"{r['slots']} sandbox slots, {r['done']} done here, {calls} calls recorded",
                    soft_wrap=True,
                    highlight=False,
                    markup=False,
                )


def run_cluster(
    sessions: sessionmaker[OrmSession],
    opts: RayOptions,
    cfg: RunConfig,
    *,
    concurrency: int | None = None,
    progress_kw: dict[str, Any] | None = None,
    more_coming: Callable[[], bool] | None = None,
) -> tuple[RunStats, dict[str, Any]]:
    """Run sessions on the cluster until nothing is left (or `cfg.limit`), with one progress table for
    the whole cluster; then stop the node proxies (each drains its uploads). `concurrency` defaults to
    the cluster's sandbox slots: one driver thread waits on each running session. While `more_coming()`
    (the harvest's translations), an empty queue is polled instead of ending the run."""
    ray_runner = RaySessionRunner(opts)
    slots = ray_runner.slots()
    if slots < 1:
        raise InfraError(f"no node of the Ray cluster at {opts.address} declares a `sandbox` resource")
    runner = Runner(
        sessions,
        ray_runner,
        cfg.model_copy(update={"concurrency": concurrency or slots}),
        more_coming=more_coming,
    )
    progress = ClusterProgress(ray_runner, **(progress_kw or {}))
    try:
        with progress.live():
            stats = runner.run(on_tick=progress.tick)
        progress.final(runner)
    finally:
        reports = ray_runner.close()
    return stats, {"proxies": reports, "done_by_node": dict(ray_runner.done_by_node)}


def run_on_cluster(
    sessions: sessionmaker[OrmSession],
    cfg: RunConfig,
    *,
    address: str,
    store_url: str | None,
    upstream: str | None,
    upstream_api: UpstreamApi,
    runner: RunnerName,
    model: str,
    image: str | None,
    time_limit_s: float | None,
    console: Console,
    more_coming: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """`factory run --ray ADDRESS` and `harvest --ray`: the sessions on the cluster, one worker thread per
    sandbox slot (the nodes' declared `sandbox` resources set the concurrency); a summary to print."""
    if not store_url:
        raise ValueError("--store-url (DFLASH_STORE_URL) is required with --ray: where the nodes' calls land")
    if not upstream:
        raise ValueError("--upstream (TARGET_URL) is required with --ray: the target every node reaches")
    opts = RayOptions(
        address=address,
        store_url=store_url,
        upstream=upstream,
        upstream_api=upstream_api,
        session_runner=runner,
        model=model,
        image=image,
        time_limit_s=time_limit_s,
    )
    cfg = cfg.model_copy(update={"proxy_url": "ray://node-proxy"})
    stats, reports = run_cluster(
        sessions, opts, cfg, progress_kw={"console": console}, more_coming=more_coming
    )
    return {
        "done": stats.done,
        "agent_failed": stats.agent_failed,
        "retries": stats.infra_retries,
        "infra_failed": stats.infra_failed,
        "lost_leases": stats.lost_leases,
        **reports,
    }
