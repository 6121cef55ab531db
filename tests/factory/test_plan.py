from collections import Counter

import pytest
from sqlalchemy import select

from factory.db import Issue, Repo, Session, connect, session_factory
from factory.run.plan import PlanConfig, parse_mix, plan

from .helpers import seed


def test_plan_is_issue_x_language_x_agent_and_idempotent(tmp_path, db_url):
    sessions = session_factory(connect(db_url))
    seed(sessions, tmp_path / "repo", repos=2, issues=3)
    s1 = plan(sessions, PlanConfig(seed=7))
    assert s1.added == s1.total == 2 * 3 * 2 * 3
    assert set(s1.by_cell.values()) == {6}
    assert plan(sessions, PlanConfig(seed=7)).added == 0


def test_korean_only_where_translated_and_first_sessions_cover_all_cells(tmp_path, sqlite_url):
    sessions = session_factory(connect(sqlite_url))
    seed(sessions, tmp_path / "repo", repos=3, issues=4, korean=False)
    summary = plan(sessions, PlanConfig(seed=1))
    assert {lang for lang, _ in summary.by_cell} == {"en"}
    assert summary.total == 12 * 3


def test_first_six_claims_cover_every_agent_and_language(tmp_path, sqlite_url):
    sessions = session_factory(connect(sqlite_url))
    seed(sessions, tmp_path / "repo", repos=3, issues=4)
    plan(sessions, PlanConfig(seed=3))
    with sessions() as s:
        first = s.execute(select(Session.lang, Session.agent).order_by(Session.priority).limit(6)).all()
    assert set(first) == {(lang, a) for lang in ("en", "ko") for a in ("claude-code", "codex", "opencode")}


def test_the_claim_order_goes_round_the_issues_and_repositories(tmp_path, sqlite_url):
    """A run stopped after a few sessions spans many issues and repositories (a by-repository held-out
    split needs two): one session of every issue before a second of any."""
    sessions = session_factory(connect(sqlite_url))
    seed(sessions, tmp_path / "repo", repos=3, issues=4)
    plan(sessions, PlanConfig(seed=3))
    with sessions() as s:
        order = s.execute(
            select(Session.issue_id, Session.lang, Session.agent).order_by(Session.priority)
        ).all()
        repo_of = dict(s.execute(select(Issue.id, Repo.name).join(Repo)).all())
    n_issues = len(repo_of)
    assert n_issues == 12
    assert len({issue for issue, _, _ in order[:n_issues]}) == n_issues
    assert len({repo_of[issue] for issue, _, _ in order[:3]}) >= 2
    # Each round gives every issue another combination: no issue sees one (language, agent) twice.
    assert len(set(order)) == len(order) == n_issues * 6


def test_deterministic_under_seed_and_weights(tmp_path):
    runs = iter(range(100))

    def run(seed_, agents):
        n = next(runs)
        sessions = session_factory(connect(f"sqlite:///{tmp_path / f'p{n}.db'}"))
        seed(sessions, tmp_path / f"repo{n}", repos=4, issues=10)
        plan(sessions, PlanConfig(agents=agents, seed=seed_))
        with sessions() as s:
            return s.execute(select(Session.id, Session.priority).order_by(Session.priority)).all()

    mix = {"claude-code": 1.0, "codex": 1.0, "opencode": 0.5}
    a, b = run(5, mix), run(5, mix)
    assert a == b
    by_agent = Counter(sid for sid, _ in a)
    assert len(by_agent) == len(a)
    full = run(6, {"claude-code": 1.0, "codex": 1.0, "opencode": 1.0})
    assert len(full) == 4 * 10 * 2 * 3
    assert len(a) < len(full)


def test_parse_mix():
    assert parse_mix("claude-code,opencode=0.5", ("claude-code", "codex", "opencode")) == {
        "claude-code": 1.0,
        "opencode": 0.5,
    }
    with pytest.raises(ValueError, match="unknown"):
        parse_mix("cursor", ("claude-code",))
    with pytest.raises(ValueError, match="weights"):
        PlanConfig(agents={"codex": 2.0})
