"""Sessions planned while a run is going (Korean ones, as their translations land) are run by it too:
the runner keeps polling while more sessions may come, and stops once nothing more can."""

from __future__ import annotations

import threading
import time
from collections import Counter

from sqlalchemy import select

from factory.db import Issue, Session, Translation, connect, session_factory
from factory.run.fake_runner import FakeSessionRunner
from factory.run.plan import PlanConfig, plan
from factory.run.runner import RunConfig, Runner

from .helpers import seed


def test_sessions_planned_during_the_run_are_run(tmp_path, sqlite_url):
    sessions = session_factory(connect(sqlite_url))
    seed(sessions, tmp_path / "repo", repos=1, issues=2, korean=False)
    cfg = PlanConfig(agents={"opencode": 1.0}, langs={"en": 1.0, "ko": 1.0})
    first = plan(sessions, cfg).added  # English only: nothing is translated yet
    translating = threading.Event()
    translating.set()

    def translate_then_plan() -> None:  # what harvest's background translation does, one issue at a time
        time.sleep(0.5)
        with sessions.begin() as s:
            for issue in s.scalars(select(Issue)):
                s.add(
                    Translation(issue_id=issue.id, lang="ko", status="ok", title="버그", body="충돌합니다.")
                )
        plan(sessions, cfg)
        translating.clear()

    worker = threading.Thread(target=translate_then_plan)
    worker.start()
    runner = Runner(
        sessions,
        FakeSessionRunner(sleep_s=0.05),
        RunConfig(proxy_url="http://127.0.0.1:9", data_dir=tmp_path, concurrency=2, poll_s=0.1),
        more_coming=translating.is_set,
    )
    stats = runner.run()
    worker.join()
    with sessions() as s:
        done = Counter(
            lang for lang, status in s.execute(select(Session.lang, Session.status)) if status == "done"
        )
    assert first == 2
    assert done == {"en": 2, "ko": 2}
    assert stats.done == 4


def test_without_more_coming_an_empty_queue_ends_the_run(tmp_path, sqlite_url):
    sessions = session_factory(connect(sqlite_url))
    seed(sessions, tmp_path / "repo", repos=1, issues=1, korean=False)
    plan(sessions, PlanConfig(agents={"opencode": 1.0}, langs={"en": 1.0}))
    cfg = RunConfig(proxy_url="http://127.0.0.1:9", data_dir=tmp_path, poll_s=0.1)
    assert Runner(sessions, FakeSessionRunner(), cfg).run().done == 1
