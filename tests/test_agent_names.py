"""The agent names have one owner, `records.agents`: no other module of the project spells one.

A fourth agent should be one member of `AgentName` and its adapter, not a hunt through the rooms for every
place "codex" was written. This scans every string constant of the packages and benchmarks (tests keep
their literals: they are the data a user's records would hold)."""

from __future__ import annotations

import ast
from pathlib import Path

from records.agents import AGENT_NAMES, AgentName
from sandboxes.agents import AGENTS
from sandboxes.agents.npm_install import AGENT_PACKAGES
from trainer.data.sample_texts import SYSTEMS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "clikit",
    "records",
    "wire",
    "standin",
    "serving",
    "sandboxes",
    "proxy",
    "trainer",
    "factory",
    "benchmarks",
)
OWNER = ROOT / "records" / "agents.py"
# Same spelling, another meaning: what npm installs as the CLI's binary, what a User-Agent contains.
OTHER_MEANING = {
    ROOT / "sandboxes" / "agents" / "npm_install.py": "the CLIs' binary names",
    ROOT / "proxy" / "attribution.py": "the User-Agent markers an agent's requests carry",
}


def spelled(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in AGENT_NAMES
    ]


def test_no_module_but_the_owner_spells_an_agent_name() -> None:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 100  # the scan saw the project, not an empty folder
    found = [hit for p in files if p != OWNER and p not in OTHER_MEANING for hit in spelled(p)]
    assert found == [], "agent names belong to records.agents.AgentName:\n" + "\n".join(found)


def test_the_scan_finds_a_spelled_name(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('AGENT = "codex"\nOTHER = "codex-mini"\n')
    assert spelled(probe, tmp_path) == ["probe.py:1 'codex'"]


def test_every_agent_has_an_adapter_an_install_and_a_sample_prompt() -> None:
    for registry in (AGENTS, AGENT_PACKAGES, SYSTEMS):
        assert set(registry) == set(AgentName)
