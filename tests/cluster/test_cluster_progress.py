"""The driver's one progress table: the runner's counts plus a row per node (on a terminal), and the same
node rows as plain lines off one. The cluster is stood in for by an object with the runner's `nodes()`
(the real cluster's rows are covered by test_ray_runner.py; here only the rendering is under test)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from factory.db import connect, default_url, session_factory
from factory.run.fake_runner import FakeSessionRunner
from factory.run.ray_runner import ClusterProgress
from factory.run.runner import RunConfig, Runner

ROWS = [
    {"node": "a1b2c3d4e5f6a7b8", "ip": "10.0.0.1", "alive": True, "slots": 8, "done": 5, "calls": 1234},
    {"node": "ffee00112233", "ip": "10.0.0.2", "alive": False, "slots": 16, "done": 2, "calls": None},
]


class _Nodes:
    def nodes(self) -> list[dict[str, object]]:
        return ROWS


def _runner(tmp_path: Path) -> Runner:
    sessions = session_factory(connect(default_url(tmp_path)))
    return Runner(sessions, FakeSessionRunner(), RunConfig(proxy_url="ray://node-proxy", data_dir=tmp_path))


def test_table_has_a_row_per_node(tmp_path: Path) -> None:
    out = io.StringIO()
    progress = ClusterProgress(_Nodes(), console=Console(file=out, width=140), plain=False)  # type: ignore[arg-type]
    progress.final(_runner(tmp_path))
    text = out.getvalue()
    assert "a1b2c3d4e5f6" in text
    assert "10.0.0.2" in text
    assert "dead" in text
    assert "1,234" in text
    assert "done" in text  # the runner's own counts are still there


def test_plain_lines_name_each_node(tmp_path: Path) -> None:
    out = io.StringIO()
    progress = ClusterProgress(_Nodes(), console=Console(file=out, width=140), plain=True)  # type: ignore[arg-type]
    progress.final(_runner(tmp_path))
    lines = out.getvalue().splitlines()
    assert "node a1b2c3d4e5f6 10.0.0.1 alive: 8 sandbox slots, 5 done here, 1,234 calls recorded" in lines
    assert "node ffee00112233 10.0.0.2 dead: 16 sandbox slots, 2 done here, – calls recorded" in lines
