"""Unit tests of the sandbox layer that need no Docker engine: mirrors, image tags, adapters, labels."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandboxes.agents import AGENTS, AgentContext, get_agent
from sandboxes.agents.base import parse_jsonl
from sandboxes.agents.npm_install import AGENT_PACKAGES
from sandboxes.config import SandboxSettings
from sandboxes.images import build
from sandboxes.images.mirror import host_mirror, parse_sources
from sandboxes.labels import owner_alive, owner_token
from tests.sandboxes.conftest import base_commit, git


def test_parse_sources_reads_both_formats_and_filters_by_suite() -> None:
    one_line = "# comment\ndeb [arch=amd64] http://mirror.example/debian bookworm main\ndeb http://x.example/ other main\n"
    deb822 = "Types: deb\nURIs: http://m.example/debian\nSuites: bookworm bookworm-updates\n\nURIs: https://n.example/x\nSuites: nodistro\n"
    assert parse_sources(one_line, "bookworm") == ["http://mirror.example/debian"]
    assert parse_sources(deb822, "bookworm") == ["http://m.example/debian"]
    assert parse_sources(deb822) == ["http://m.example/debian", "https://n.example/x"]


def test_host_mirror_reads_a_root(tmp_path: Path) -> None:
    (tmp_path / "etc/apt/sources.list.d").mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list.d/debian.sources").write_text(
        "URIs: http://a.example/d\nSuites: trixie\n"
    )
    assert host_mirror("trixie", tmp_path) == "http://a.example/d"
    # A release the host's sources do not name comes from the host's Debian archive (it serves them all).
    assert host_mirror("bookworm", tmp_path) == "http://a.example/d"
    (tmp_path / "etc/apt/sources.list.d/debian.sources").write_text(
        "URIs: http://s.example/sec\nSuites: trixie-security\n\nURIs: https://n.example/x\nSuites: nodistro\n"
    )
    with pytest.raises(RuntimeError, match="DFLASH_SANDBOX_MIRROR"):
        host_mirror("bookworm", tmp_path)


def test_image_tags_hash_their_inputs(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    ca.mkdir()
    (ca / "corp.crt").write_text("cert one")
    settings = SandboxSettings(mirror="http://a.example/debian", ca_dir=ca)
    first = build.agents_tag(settings)
    assert first == build.agents_tag(settings), "same inputs, same tag (so no rebuild)"
    (ca / "corp.crt").write_text("cert two")
    assert build.agents_tag(settings) != first, "a changed CA certificate must rebuild the image"
    other_mirror = settings.model_copy(update={"mirror": "http://b.example/debian"})
    assert build.base_tag(other_mirror) != build.base_tag(settings)
    assert build.agents_tag(other_mirror) != build.agents_tag(settings), (
        "a new base rebuilds the agents image"
    )
    pulled = settings.model_copy(update={"base_image": "debian:bookworm-slim"})
    assert build.base_tag(pulled) == "debian:bookworm-slim"


def test_agent_specs_are_the_pinned_versions() -> None:
    specs = build.agent_specs()
    for package, version, _ in AGENT_PACKAGES.values():
        assert f"{package}@{version}" in specs
    assert build.opencode_plugin_spec().endswith("@" + AGENT_PACKAGES["opencode"][1])


def _ctx(task: str = "Fix the bug") -> AgentContext:
    return AgentContext(
        base_url="http://172.18.0.1:4000/s/sess-1",
        api_key="dflash-sess-1-abc",
        model="m",
        task=task,
        home="/home/agent",
        workdir="/work/repo",
    )


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_adapters_point_at_the_session_prefix_with_the_dummy_key(name: str) -> None:
    agent = get_agent(name)
    ctx = _ctx("버그를 고치세요")
    blob = json.dumps([agent.files(ctx), agent.env(ctx)], ensure_ascii=False)
    assert "http://172.18.0.1:4000/s/sess-1" in blob
    assert "dflash-sess-1-abc" in blob
    assert "ANTHROPIC_API_KEY" not in agent.env(ctx) or agent.env(ctx)["ANTHROPIC_API_KEY"] == ctx.api_key
    assert "버그를 고치세요" in agent.command(ctx), "the task goes to the CLI verbatim, Korean included"
    assert all(path.startswith("/home/agent/") for path in agent.files(ctx))


def test_unknown_agent_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="claude-code"):
        get_agent("aider")


@pytest.mark.parametrize(
    ("name", "events", "expected"),
    [
        ("claude-code", [{"type": "system", "subtype": "init", "session_id": "u-1"}], "u-1"),
        ("codex", [{"type": "thread.started", "thread_id": "t-1"}], "t-1"),
        ("opencode", [{"type": "step_start", "part": {"sessionID": "ses_1"}, "sessionID": "ses_1"}], "ses_1"),
        ("opencode", [{"type": "text", "part": {"sessionID": "ses_2"}}], "ses_2"),
    ],
)
def test_session_id_from_transcript(name: str, events: list[dict[str, object]], expected: str) -> None:
    assert get_agent(name).session_id(events) == expected  # type: ignore[arg-type]


def test_parse_jsonl_keeps_non_json_lines() -> None:
    assert parse_jsonl('{"a": 1}\nnot json\n[1]\n\n') == [{"a": 1}, {"raw": "not json"}, {"raw": "[1]"}]


def test_owner_token_tells_live_from_dead() -> None:
    assert owner_alive(owner_token())
    dead = owner_token().rsplit(":", 1)[0] + ":0"
    assert not owner_alive(dead), "same pid, other start time: a reused pid is not the owner"
    assert not owner_alive(f"{os.uname().nodename}:999999999:1")


class _FakeApi:
    def networks(self) -> list[dict[str, object]]:
        return [{"IPAM": {"Config": [{"Subnet": "10.9.0.0/29"}, {"Subnet": "fd00::/64"}]}}, {"IPAM": None}]


class _FakeClient:
    api = _FakeApi()


def test_free_subnets_skip_taken_ones() -> None:
    from sandboxes.network import free_subnets

    got = list(free_subnets(_FakeClient(), "10.9.0.0/28", 29))  # type: ignore[arg-type]
    assert [str(s) for s in got] == ["10.9.0.8/29"], "the first /29 is a Docker network's"


SESSION_HEADERS = {
    "claude-code": "x-claude-code-session-id",
    "codex": "session-id",
    "opencode": "x-session-id",
}


@pytest.mark.parametrize("name", sorted(SESSION_HEADERS))
def test_session_id_from_a_real_transcript_matches_the_cli_header(name: str) -> None:
    """H1's captures of the real CLIs: the id read from the transcript is the one the proxy sees."""
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / name
    events = parse_jsonl((folder / "transcript.jsonl").read_text())
    headers = json.loads((folder / "first_request.json").read_text())["headers"]
    pairs = headers.items() if isinstance(headers, dict) else headers
    sent = {k.lower(): v for k, v in pairs}[SESSION_HEADERS[name]]
    assert get_agent(name).session_id(events) == sent


def test_checkout_tar_holds_the_base_tree_and_no_history(tmp_path: Path) -> None:
    import io
    import subprocess
    import tarfile

    from sandboxes.repo import checkout_tar

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("base\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    base = base_commit(src)
    (src / "future.txt").write_text("fix\n")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "two")
    data, head = checkout_tar(src, "HEAD~1", "repo", uid=1000)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        assert {m.uid for m in tar.getmembers()} == {1000}
        assert tar.getmember("repo/run.sh").mode & 0o111, "the executable bit survives"
        tar.extractall(tmp_path / "out", filter="tar")
    assert "repo/a.txt" in names
    assert "repo/future.txt" not in names
    out = tmp_path / "out" / "repo"
    log = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(out), "log", "--all", "--format=%H %s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert log == f"{head} base {base}", "one commit, naming the base, and nothing after it"
    with pytest.raises(ValueError, match="not a commit"):
        checkout_tar(src, "no-such-rev", "repo", uid=1000)


ENSURE_ENGINE = Path(__file__).resolve().parents[2] / "sandboxes" / "images" / "ensure_engine.sh"


@pytest.mark.skipif(os.geteuid() != 0, reason="drops from root to another user to take the non-root path")
def test_make_docker_tells_a_non_root_user_what_to_do() -> None:
    import shutil
    import subprocess

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing")
    env = {"PATH": os.environ["PATH"], "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    res = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(ENSURE_ENGINE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1
    assert "Install Docker Engine" in res.stderr
    assert "docker info" in res.stderr
