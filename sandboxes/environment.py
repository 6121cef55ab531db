"""Everything a session needs before its agent starts: the family image, the egress image, the environment.

`prepare` never raises for the repository's own faults: a setup that fails (now or too often before) leaves
the session on its family image with a copy of the tree and the failure in `setup`, so the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from sandboxes.config import SandboxSettings
from sandboxes.detect import Plan, plan_for
from sandboxes.egress import build_egress_image
from sandboxes.envimage import ensure_env_image
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
        return {
            "image": self.image,
            "prepared_base": self.prepared_base,
            "test_command": self.test_command,
            "egress_image": self.egress_image,
            "setup": self.setup,
        }


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
    out = ensure_env_image(
        client,
        settings,
        repo=repo,
        repo_id=repo_id or str(repo.resolve()),
        commit=sha,
        plan=plan,
        family_image=family,
        egress_image=egress if plan.setup else None,
    )
    if out.image is None:
        return Prepared(family, None, test_command, session_egress, out.to_dict(), plan)
    return Prepared(out.image, out.base_sha, test_command, session_egress, out.to_dict(), plan)
