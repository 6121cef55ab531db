"""Everything a session needs before its agent starts: the family image, the egress image, the environment.

`prepare` never raises for the repository's own faults: a setup that fails (now or too often before) leaves
the session on its family image with a copy of the tree and the failure in `setup`, so the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import docker

from sandboxes.config import SandboxSettings
from sandboxes.detect import Plan, plan_for
from sandboxes.egress import build_egress_image
from sandboxes.envimage import EnvSource, ensure_env_image
from sandboxes.families import build_family
from sandboxes.repo import resolve


@dataclass
class Prepared:
    """What to put in a `SessionRequest`: image, prepared_base, test_command, egress_image, setup."""

    image: str
    prepared_base: str | None
    test_command: str | None
    egress_image: str | None
    setup: dict[str, Any]
    plan: Plan

    def request_fields(self) -> dict[str, Any]:
        # The plan chose the others; a request has no field for it.
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "plan"}


def prepare(
    client: docker.DockerClient,
    settings: SandboxSettings,
    agents_image: str,
    repo: Path,
    commit: str,
    *,
    repo_id: str | None = None,
    setup: str | None = None,
    test: str | None = None,
    language: str | None = None,
) -> Prepared:
    sha = resolve(repo, commit)
    plan = plan_for(repo, sha, setup=setup, test=test, language=language)
    family = build_family(client, agents_image, plan.family, settings.suite)
    egress = build_egress_image(client, settings)
    session_egress = egress if settings.egress == "registries" else None
    test_command = plan.test or None
    # Setup always runs with egress on: installing the dependencies is what it is for. A repository with
    # nothing to install still gets an image holding its checkout, so no session copies its tree in.
    source = EnvSource(repo, repo_id or str(repo.resolve()), sha, plan, family)
    out = ensure_env_image(client, settings, source, egress if plan.setup else None)
    if out.image is None:
        return Prepared(family, None, test_command, session_egress, out.to_dict(), plan)
    return Prepared(out.image, out.base_sha, test_command, session_egress, out.to_dict(), plan)
