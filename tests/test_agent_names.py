"""The agent names have one owner, `records.agents`: no other module of the project spells one.

A fourth agent should be one member of `AgentName` and its adapter, not a hunt through the rooms for every
place "codex" was written. This scans every string constant of the packages and benchmarks (tests keep
their literals: they are the data a user's records would hold)."""

from __future__ import annotations

from pathlib import Path

from records.agents import AGENT_NAMES, AgentName
from sandboxes.agents import AGENTS
from sandboxes.agents.npm_install import AGENT_PACKAGES
from tests.support import REPO_ROOT as ROOT
from tests.support.literals import scan, spelled
from trainer.data.sample_texts import SYSTEMS

OWNER = ROOT / "records" / "agents.py"
# Same spelling, another meaning: what npm installs as the CLI's binary, what a User-Agent contains.
OTHER_MEANING = {
    ROOT / "sandboxes" / "agents" / "npm_install.py": "the CLIs' binary names",
    ROOT / "proxy" / "attribution.py": "the User-Agent markers an agent's requests carry",
}


def test_no_module_but_the_owner_spells_an_agent_name() -> None:
    found = scan(AGENT_NAMES, {OWNER, *OTHER_MEANING})
    assert found == [], "agent names belong to records.agents.AgentName:\n" + "\n".join(found)


def test_the_scan_finds_a_spelled_name(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('AGENT = "codex"\nOTHER = "codex-mini"\n')
    assert spelled(probe, AGENT_NAMES, tmp_path) == ["probe.py:1 'codex'"]


def test_every_agent_has_an_adapter_an_install_and_a_sample_prompt() -> None:
    for registry in (AGENTS, AGENT_PACKAGES, SYSTEMS):
        assert set(registry) == set(AgentName)
