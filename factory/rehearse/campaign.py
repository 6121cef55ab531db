"""The seed's campaign as synthetic issues over the registry's real repositories, planned by the real planner.

Each repository's checkout is one of the bundled sample repositories of its language (a Python, a
JavaScript one; any other language gets the Python one), so the brain's commands read, edit and test real
files. Loading is idempotent: a second call adds nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Repo, Translation
from factory.ingest import registry, sample
from factory.run.plan import PlanConfig, plan

SOURCE = "rehearsal"  # repos.source of a rehearsal's repositories
_CHUNK = 5000
_DATE = "2024-06-01T00:00:00Z"  # after every sample commit: the base commit is each sample's head


class CampaignShape(BaseModel):
    """The campaign's size; the defaults are the seed's (607 repositories, 17,615 issues, 16,737 in Korean)."""

    repos: int = Field(default=607, ge=1, description="Repositories of repos.yaml the issues spread over.")
    issues: int = Field(default=17_615, ge=1, description="Synthetic issues in the plan.")
    translated: int = Field(default=16_737, ge=0, description="Issues with an accepted Korean version.")


@dataclass
class Planned:
    repos: int
    issues: int
    translations: int
    sessions: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return (self.repos + self.issues + self.translations + self.sessions) / max(self.seconds, 1e-9)


def _checkouts(root: Path) -> dict[str, tuple[str, str, str | None]]:
    """language → (clone path, head commit, test command) of the sample repositories."""
    out: dict[str, tuple[str, str, str | None]] = {}
    for s in sample.load():
        path = sample.materialize(s, root)
        out.setdefault(s.language, (str(path), sample.base_commit(path, _DATE), s.test))
    return out


def _issue_text(repo: str, number: int) -> tuple[str, str, str, str]:
    """Title and body in English and Korean (the brain reads only the task's language and its test line)."""
    title = f"{repo.split('/')[1]}: wrong result for an edge case (#{number})"
    body = (
        f"Running the documented example of {repo} on an empty input gives a traceback instead of a clear "
        "error message. Expected: a one-line error naming the input. Seen on the current main branch."
    )
    ko_title = f"{repo.split('/')[1]}: 경계 사례에서 잘못된 결과 (#{number})"
    ko_body = "빈 입력으로 문서의 예제를 실행하면 명확한 오류 메시지 대신 트레이스백이 나옵니다. 기대 동작: 입력을 가리키는 한 줄 오류."
    return title, body, ko_title, ko_body


def load(sessions: sessionmaker[OrmSession], shape: CampaignShape, data_dir: Path) -> tuple[int, int, int]:
    """Insert the campaign's repositories, issues and Korean versions (bulk); returns the rows added."""
    with sessions.begin() as s:
        if s.scalar(select(func.count()).select_from(Repo).where(Repo.source == SOURCE)):
            return 0, 0, 0
    entries = registry.load().repos[: shape.repos]
    checkouts = _checkouts(data_dir / "sample-repos")
    fallback = checkouts.get("Python") or next(iter(checkouts.values()))
    with sessions.begin() as s:
        rows: list[dict[str, object]] = []
        for e in entries:
            path, _, test = checkouts.get(e.language, fallback)
            rows.append(
                {
                    "name": e.name,
                    "language": e.language,
                    "license": e.license,
                    "source": SOURCE,
                    "clone_url": path,
                }
                | {"status": "ok", "default_branch": "main", "test_command": test}
            )
        s.execute(insert(Repo), rows)
        ids = dict(s.execute(select(Repo.name, Repo.id).where(Repo.source == SOURCE)).tuples().all())
    per_repo = [shape.issues // len(entries) + (i < shape.issues % len(entries)) for i in range(len(entries))]
    issues = []
    for e, n in zip(entries, per_repo, strict=True):
        commit = checkouts.get(e.language, fallback)[1]
        for number in range(1, n + 1):
            title, body, _, _ = _issue_text(e.name, number)
            issues.append(
                {"repo_id": ids[e.name], "number": number, "title": title, "body": body, "labels": []}
                | {"state": "open", "created_at": _DATE, "updated_at": _DATE, "base_commit": commit}
            )
    for i in range(0, len(issues), _CHUNK):
        with sessions.begin() as s:
            s.execute(insert(Issue), issues[i : i + _CHUNK])
    _translate(sessions, ids, shape.translated)
    return len(entries), len(issues), min(shape.translated, len(issues))


def _translate(sessions: sessionmaker[OrmSession], repo_ids: dict[str, int], wanted: int) -> None:
    with sessions.begin() as s:
        rows = s.execute(
            select(Issue.id, Issue.number, Repo.name)
            .join(Repo)
            .where(Repo.id.in_(repo_ids.values()))
            .order_by(Issue.id)
            .limit(wanted)
        ).all()
    out = []
    for issue_id, number, name in rows:
        _, _, title, body = _issue_text(name, number)
        out.append(
            {"issue_id": issue_id, "lang": "ko", "status": "ok", "title": title, "body": body}
            | {"model": SOURCE}
        )
    for i in range(0, len(out), _CHUNK):
        with sessions.begin() as s:
            s.execute(insert(Translation), out[i : i + _CHUNK])


def plan_campaign(
    sessions: sessionmaker[OrmSession], shape: CampaignShape, data_dir: Path, seed: int = 0
) -> Planned:
    """Load the issues, then plan every session (issue × language × agent) with the real planner, timed."""
    t0 = time.monotonic()
    repos, issues, translations = load(sessions, shape, data_dir)
    added = plan(sessions, PlanConfig(seed=seed)).added
    return Planned(repos, issues, translations, added, time.monotonic() - t0)
