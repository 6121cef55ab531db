"""Environment images: a repository at its base commit with its setup done, committed once and reused.

The first session of a repository at a commit runs the setup in a sandbox of its family's image with egress
on, then commits the container — checkout included — as `<image_repo>-env:<key>`, the key hashing the
repository, commit, lockfiles, setup command and family image. Later sessions start from it with no copy of
the tree. A failed setup is recorded under `env_state_dir` and retried at most `setup_retries` times per key;
a per-key file lock lets one process build while sessions of other repositories go on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import docker
import requests

from sandboxes.config import SandboxSettings
from sandboxes.detect import Plan
from sandboxes.images.build import _digest, _exists
from sandboxes.labels import ENV_BASE, ENV_COMMIT, ENV_CREATED, ENV_FAMILY_IMAGE, ENV_REPO, IMAGE
from sandboxes.sandbox import Sandbox, SandboxSpec

KIND = IMAGE
BASE_LABEL = ENV_BASE
NO_MODEL = "http://127.0.0.1:9"  # setup talks to no model; the relay to this port is never used
# Untracked files the setup left (a venv, node_modules, build output) join the repository's excludes, so
# they never show up in an agent's patch; tracked files it changed are committed into the base.
ABSORB = (
    "mkdir -p .git/info && git ls-files --others --exclude-standard --directory | sed 's|^|/|' >> .git/info/exclude"
    " && (git diff --quiet || git -c core.hooksPath=/dev/null commit -qam 'environment setup')"
    " && git rev-parse HEAD"
)


@dataclass
class SetupOutcome:
    # "built", "cached" or "failed"; a repository without a setup command gets a checkout-only image.
    status: str
    image: str | None
    base_sha: str | None = None
    reason: str | None = None
    attempts: int = 0
    seconds: float = 0.0
    tail: str = ""
    egress: list[dict[str, object]] = field(default_factory=list)  # what the setup fetched, host and bytes

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class EnvSource:
    """What an environment image is made of: a repository at a commit, its setup plan and its family image."""

    repo: Path
    repo_id: str
    commit: str
    plan: Plan
    family_image: str

    def key(self) -> str:
        return _digest(
            {
                "repo": self.repo_id,
                "commit": self.commit,
                "lock": self.plan.lock_hash,
                "setup": self.plan.setup,
                "family": self.family_image,
            }
        )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _free_gb(client: docker.DockerClient) -> float:
    root = client.info().get("DockerRootDir") or "/var/lib/docker"
    return shutil.disk_usage(root if Path(root).exists() else "/").free / 2**30


def ensure_env_image(
    client: docker.DockerClient,
    settings: SandboxSettings,
    source: EnvSource,
    egress_image: str | None,  # None: the setup needs no registries (nothing to install)
) -> SetupOutcome:
    """The environment image of `source`, built when missing; a failure is an outcome, not a raise."""
    key = source.key()
    tag = f"{settings.image_repo}-env:{key}"
    state = settings.env_state_dir / "env" / f"{key}.json"
    with _locked(state.with_suffix(".lock")):
        if _exists(client, tag):
            return SetupOutcome("cached", tag, client.images.get(tag).labels.get(BASE_LABEL))
        record: dict[str, Any] = json.loads(state.read_text()) if state.exists() else {"attempts": 0}
        if record["attempts"] >= settings.setup_retries:
            reason = f"setup failed {record['attempts']} times, not retried: {record.get('reason')}"
            return SetupOutcome(
                "failed", None, reason=reason, attempts=record["attempts"], tail=record.get("tail", "")
            )
        free = _free_gb(client)
        if free < settings.env_min_free_gb:
            # Not the repository's fault: no attempt is counted.
            reason = f"out of disk: {free:.1f} GiB free for Docker, {settings.env_min_free_gb:g} GiB needed"
            return SetupOutcome("failed", None, reason=reason, attempts=record["attempts"])
        out = _build(client, settings, source, egress_image, tag)
        if out.status == "built":  # a new image: hold the images to their age and disk budget now
            gc_env_images(client, settings, keep=tag)
        if out.status == "failed" and not (out.reason or "").startswith("out of disk"):
            out.attempts = record["attempts"] + 1
            record = {
                "repo": source.repo_id,
                "commit": source.commit,
                "attempts": out.attempts,
                "reason": out.reason,
                "tail": out.tail,
            }
            state.write_text(json.dumps(record))
        return out


def _build(
    client: docker.DockerClient,
    settings: SandboxSettings,
    source: EnvSource,
    egress_image: str | None,
    tag: str,
) -> SetupOutcome:
    t0 = time.monotonic()
    limit = settings.setup_time_limit_s
    box_settings = settings.model_copy(update={"wall_time_s": limit + 120})
    spec = SandboxSpec(
        "env-setup",
        f"env-{tag.rsplit(':', 1)[1]}",
        source.repo,
        source.commit,
        NO_MODEL,
        source.family_image,
        box_settings,
        egress_image=egress_image,
    )
    # Committing (and removing) a container that holds a large tree outlasts the SDK's 60 s default under load.
    slow = docker.from_env(timeout=int(limit))
    with Sandbox(spec, slow) as box:
        res = box.exec(["sh", "-c", source.plan.setup], timeout=limit)
        fetched = [asdict(h) for h in box.egress.hits()] if box.egress else []
        tail = (res.stdout + res.stderr).decode(errors="replace")[-4000:]
        if res.exit_code != 0:
            why = (
                f"timeout: setup passed its {limit:.0f} s limit"
                if res.timed_out
                else f"exit code {res.exit_code}"
            )
            free = _free_gb(client)
            # The disk filled while installing: the machine's fault, not the repository's (the "out of
            # disk" reason is what ensure_env_image counts no attempt for).
            full = "no space left on device" in tail.lower() or free < settings.env_min_free_gb
            return SetupOutcome(
                "failed",
                None,
                reason=f"out of disk during setup ({free:.1f} GiB free for Docker): {why}"
                if full
                else f"setup `{source.plan.setup}`: {why}",
                seconds=round(time.monotonic() - t0, 2),
                egress=fetched,
                tail=tail,
            )
        absorbed = box.exec(["sh", "-c", ABSORB], timeout=300)
        if absorbed.exit_code != 0:
            reason = f"recording the setup's files failed: {absorbed.stderr.decode(errors='replace')[-500:]}"
            return SetupOutcome("failed", None, reason=reason, tail=tail)
        base = absorbed.stdout.decode().split()[-1]
        labels = {
            KIND: "env",
            BASE_LABEL: base,
            ENV_REPO: source.repo_id,
            ENV_COMMIT: source.commit,
            ENV_FAMILY_IMAGE: source.family_image,
            ENV_CREATED: str(int(time.time())),
            # The setup sandbox's own labels must not mark containers started from this image.
            **dict.fromkeys(box.labels, ""),
        }
        repository, _, name = tag.rpartition(":")
        try:
            assert box.container is not None
            box.container.commit(repository=repository, tag=name, conf={"Labels": labels})
        except docker.errors.APIError as exc:
            why = "out of disk" if "no space left" in str(exc).lower() else "commit failed"
            return SetupOutcome("failed", None, reason=f"{why}: {exc}", tail=tail)
    return SetupOutcome(
        "built", tag, base, seconds=round(time.monotonic() - t0, 2), tail=tail, egress=fetched
    )


def gc_env_images(
    client: docker.DockerClient,
    settings: SandboxSettings,
    *,
    now: float | None = None,
    dry_run: bool = False,
    repo_id: str | None = None,
    keep: str | None = None,
) -> list[str]:
    """Remove environment images past `env_max_age_days`, then the oldest until they fit `env_budget_gb`
    (only `repo_id`'s images when given; never `keep`, the image a session is about to use). Images in
    use by a running session are left for the next time (Docker refuses to remove them)."""
    now = time.time() if now is None else now
    images = []
    wanted = [f"{KIND}=env"] + ([f"{ENV_REPO}={repo_id}"] if repo_id else [])
    for img in client.images.list(filters={"label": wanted}):
        labels = img.labels
        family = labels.get(ENV_FAMILY_IMAGE, "")
        try:
            below = client.images.get(family).attrs["Size"] if family else 0
        except docker.errors.ImageNotFound:
            below = 0
        own = max(0, int(img.attrs["Size"]) - int(below))  # shared layers below are not this image's cost
        images.append((int(labels.get(ENV_CREATED, "0")), own, img))
    images.sort(key=lambda x: x[0])
    total = sum(own for _, own, _ in images)
    removed = []
    for created, own, img in images:
        too_old = now - created > settings.env_max_age_days * 86400
        if (not too_old and total <= settings.env_budget_gb * 2**30) or (keep and keep in img.tags):
            continue
        tag = img.tags[0] if img.tags else img.id
        if not dry_run:
            try:
                client.images.remove(img.id, force=False)
            except (docker.errors.APIError, requests.exceptions.RequestException):
                continue  # in use by a running session, or slower than the client's timeout: next time
        removed.append(tag)
        total -= own
    return removed
