"""One sandbox per session: a confined container holding the repository at its base commit.

Use it only as a context manager; teardown (container, firewall rules, network, relay) always runs on exit.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType
from urllib.parse import urlsplit

import docker
from docker.models.containers import Container

from records.atomic import write_text
from sandboxes import cgroups
from sandboxes.config import SandboxSettings
from sandboxes.containers import remove_container
from sandboxes.egress import EgressProxy
from sandboxes.errors import SandboxInputError, SandboxSetupError
from sandboxes.files import read_file, tar_files
from sandboxes.labels import labels
from sandboxes.network import ConfinedNetwork
from sandboxes.relay import TcpRelay
from sandboxes.repo import checkout_tar, resolve

AGENT_UID = 1000  # the image's `agent` user
NO_RESOLVER = "nameserver 127.0.0.1\n"
KILLED = 137  # 128 + SIGKILL: what `timeout -s KILL` and the OOM killer both leave


@dataclass
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float
    timed_out: bool = False
    oom_killed: bool = False


@dataclass
class SandboxSpec:
    run_id: str
    session_id: str
    repo: Path
    commit: str
    proxy_url: str
    image: str
    settings: SandboxSettings = field(default_factory=lambda: SandboxSettings())
    # With an egress image, a squid of the sandbox's own lets it reach the package registries.
    egress_image: str | None = None
    # An environment image already holds the checkout: its single commit's id, and no copy goes in.
    prepared_base: str | None = None


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _resolv_conf() -> Path:
    path = Path(tempfile.gettempdir()) / "dflash-sandbox-resolv.conf"
    if not path.exists() or path.read_text() != NO_RESOLVER:
        write_text(path, NO_RESOLVER)  # atomically: other threads' sandboxes may be bind-mounting it now
    return path


def _memory_bytes(spec: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    spec = spec.strip().lower().rstrip("b")
    return int(float(spec[:-1]) * units[spec[-1]]) if spec[-1] in units else int(spec)


class Sandbox:
    def __init__(self, spec: SandboxSpec, client: docker.DockerClient | None = None) -> None:
        self.spec = spec
        self.settings = spec.settings
        self.client = client or docker.from_env()
        key = _short(f"{spec.run_id}/{spec.session_id}/{time.time_ns()}")
        self.name = f"dflash-sbx-{key}"
        self.labels = labels(spec.run_id, spec.session_id)
        self.net = ConfinedNetwork(
            self.client,
            self.name,
            f"dfs{key}",
            self.labels,
            spec.settings.subnet_pool,
            spec.settings.subnet_prefix,
        )
        target = urlsplit(spec.proxy_url)
        if target.scheme != "http" or not target.hostname:
            raise SandboxInputError(f"--proxy must be an http URL with a host, got {spec.proxy_url!r}")
        self._proxy_path = target.path.rstrip("/")
        self.commit = resolve(spec.repo, spec.commit)  # a bad revision fails before anything is created
        self.relay = TcpRelay("0.0.0.0", target.hostname, target.port or 80)
        self.container: Container | None = None
        self.timings: dict[str, float] = {}
        self.base_sha = ""
        self.expired = False
        self._oom_seen = 0
        self._deadline = 0.0
        self._watchdog: threading.Timer | None = None
        self.egress: EgressProxy | None = None
        self.exec_env: dict[str, str] = {}  # every exec gets these (the egress proxy's variables)

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _timed(self, name: str, start: float) -> None:
        self.timings[name] = round(time.monotonic() - start, 4)

    def _setup(self) -> None:
        if self.spec.prepared_base:
            self._start_container()
            self.base_sha = self.spec.prepared_base
            self._write_gitconfig()
            return
        # The repository is prepared on the host while the network and container come up.
        with ThreadPoolExecutor(max_workers=1) as pool:
            wd = PurePosixPath(self.settings.workdir)
            prepared = pool.submit(checkout_tar, self.spec.repo, self.commit, wd.name, AGENT_UID)
            try:
                self._start_container()
            except BaseException:
                prepared.cancel()
                raise
            t = time.monotonic()
            self._copy_repo(prepared)
            self._timed("copy_repo", t)

    def _start_container(self) -> None:
        t = time.monotonic()
        gateway = self.net.create()
        self.relay.listen_host = gateway
        self.net.allow(self.relay.start())
        if self.spec.egress_image:
            self.egress = EgressProxy(self.client, self.spec.egress_image, self.name, self.labels)
            self.egress.start(self.name, list(self.settings.egress_extra_hosts))
            self.exec_env = self.egress.env(no_proxy=f"{gateway},localhost,127.0.0.1")
        self._timed("network", t)
        t = time.monotonic()
        s = self.settings
        mem = _memory_bytes(s.memory)
        self.container = self.client.containers.create(
            self.spec.image,
            command=["sleep", "infinity"],
            name=self.name,
            labels=self.labels,
            init=True,
            network=self.name,
            hostname="sandbox",
            working_dir="/work",
            mem_limit=mem,
            memswap_limit=mem,
            nano_cpus=int(s.cpus * 1e9),
            pids_limit=s.pids,
            cap_drop=["NET_RAW", "NET_ADMIN", "SYS_ADMIN", "MKNOD"],
            security_opt=["no-new-privileges"],
            sysctls={"net.ipv6.conf.all.disable_ipv6": "1"},
            environment={"HOME": f"/home/{s.user}"},
            # No resolver inside: lookups fail at once instead of timing out on Docker's embedded one
            # (which can reach nothing from an internal network either).
            volumes={str(_resolv_conf()): {"bind": "/etc/resolv.conf", "mode": "ro"}},
        )
        self._timed("create", t)
        t = time.monotonic()
        self.container.start()
        self._deadline = time.monotonic() + s.wall_time_s
        self._watchdog = threading.Timer(s.wall_time_s, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()
        self._timed("start", t)

    def _expire(self) -> None:
        self.expired = True
        if self.container is not None:
            with contextlib.suppress(docker.errors.APIError):
                self.container.kill()

    def close(self) -> None:
        t = time.monotonic()
        errors: list[str] = []
        if self._watchdog is not None:
            self._watchdog.cancel()
        errors += remove_container(
            self.container, "container"
        )  # the egress proxy, network and relay still go
        self.container = None
        if self.egress is not None:
            errors += self.egress.close()
        errors += self.net.remove()
        self.relay.stop()
        self._timed("teardown", t)
        if errors:
            raise SandboxSetupError(
                "sandbox teardown incomplete (run `python -m sandboxes gc`): " + "; ".join(errors)
            )

    # -- inside ----------------------------------------------------------------------------------------
    @property
    def proxy_url(self) -> str:
        """The proxy's URL as the sandbox sees it."""
        return f"http://{self.net.gateway}:{self.relay.port}{self._proxy_path}"

    def remaining(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def exec(
        self,
        cmd: list[str],
        *,
        user: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        workdir: str | None = None,
    ) -> ExecResult:
        """Run `cmd` inside; `timeout -s KILL` bounds it, since the Engine API's exec has no timeout."""
        assert self.container is not None, "sandbox is not running"
        limit = min(timeout or self.remaining(), self.remaining())
        if limit <= 0:
            return ExecResult(KILLED, b"", b"wall-time limit reached", 0.0, timed_out=True)
        api = self.client.api
        wrapped = [
            "timeout",
            "-s",
            "KILL",
            str(max(1, math.ceil(limit))),
            "sh",
            "-c",
            'exec "$@" </dev/null',
            "sh",
            *cmd,
        ]
        t = time.monotonic()
        exec_id = api.exec_create(
            self.container.id,
            wrapped,
            user=user or self.settings.user,
            environment={**self.exec_env, **(env or {})},
            workdir=workdir or self.settings.workdir,
        )["Id"]
        out, err = api.exec_start(exec_id, demux=True)
        seconds = time.monotonic() - t
        code = api.exec_inspect(exec_id).get("ExitCode")
        code = KILLED if code is None else int(code)
        oom = False
        if code == KILLED and not self.expired:
            kills = self._oom_kills()
            oom, self._oom_seen = kills > self._oom_seen, kills
        timed_out = self.expired or (code == KILLED and not oom and seconds >= limit - 1)
        return ExecResult(code, out or b"", err or b"", seconds, timed_out=timed_out, oom_killed=oom)

    def _oom_kills(self) -> int:
        return 0 if self.container is None or self.expired else cgroups.oom_kills(self.container)

    def memory_peak_mb(self) -> float | None:
        """The container's peak memory so far, page cache included, in MiB."""
        return None if self.container is None or self.expired else cgroups.memory_peak_mb(self.container)

    def kill_leftovers(self) -> None:
        """Kill what the agent left running (children of a killed CLI hold memory and may still write)."""
        if self.container is not None and not self.expired:
            with contextlib.suppress(docker.errors.APIError):
                self.container.exec_run(["pkill", "-KILL", "-u", self.settings.user], user="root")

    def _copy_repo(self, prepared: Future[tuple[bytes, str]]) -> None:
        assert self.container is not None
        tar, self.base_sha = prepared.result()
        self.container.put_archive(str(PurePosixPath(self.settings.workdir).parent), tar)
        self._write_gitconfig()

    def _write_gitconfig(self) -> None:
        assert self.container is not None
        gitconfig = "[user]\n\tname = sandbox\n\temail = sandbox@localhost\n[safe]\n\tdirectory = *\n"
        self.container.put_archive(
            f"/home/{self.settings.user}", tar_files({".gitconfig": gitconfig}, AGENT_UID, mode=0o644)
        )

    def patch(self) -> bytes:
        """Everything the agent changed against the base commit, binary files included."""
        # Written to a file and fetched as an archive: the session's product must not depend on an exec
        # stream (a concurrent session once came back with a patch missing its last file).
        out = f"/tmp/dflash-patch-{self.base_sha[:12]}"
        res = self.exec(
            ["sh", "-c", f"git add -A && git diff --cached --binary {self.base_sha} > {out}"], timeout=120
        )
        if res.exit_code != 0:
            raise SandboxSetupError(f"collecting the patch failed: {res.stderr.decode()}")
        assert self.container is not None
        return read_file(self.container, out)
