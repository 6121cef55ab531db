"""Run the three real agent CLIs headless against a base URL, each in its own fresh home.

Test helper (the sandbox adapters of ``sandboxes/agents`` do the same inside Docker). Every run gets a
clean environment built from scratch, so none of the caller's API keys or settings leak into the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.scripted_policy import PROOF_FILE

DUMMY_KEY = "sk-dummy-client-key"
TASK = f"Create the file {PROOF_FILE} using the shell tool, then say done."
AGENTS = ("claude-code", "codex", "opencode")


@dataclass
class AgentRun:
    agent: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    workdir: Path

    @property
    def proof(self) -> Path:
        return self.workdir / PROOF_FILE

    def json_events(self) -> list[dict[str, object]]:
        """The CLI's JSON-lines transcript (non-JSON lines are skipped)."""
        events = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
        return events


def _base_env(home: Path) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": str(home / "tmp"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return env


def claude_command(binary: Path, base_url: str, home: Path, model: str) -> tuple[list[str], dict[str, str]]:
    env = _base_env(home) | {
        "IS_SANDBOX": "1",  # as root, --dangerously-skip-permissions refuses without it
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    args = [str(binary), "-p", TASK, "--output-format", "stream-json", "--verbose"]
    return [*args, "--dangerously-skip-permissions"], env


def codex_command(binary: Path, base_url: str, home: Path, model: str) -> tuple[list[str], dict[str, str]]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "target"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\n'
        "check_for_update_on_startup = false\n"
        "[model_providers.target]\n"
        'name = "target"\n'
        f'base_url = "{base_url}/v1"\n'
        'env_key = "TARGET_API_KEY"\n'
        'wire_api = "responses"\n'
        "[analytics]\nenabled = false\n"
        "[features]\nplugins = false\n"
    )
    env = _base_env(home) | {"CODEX_HOME": str(codex_home), "TARGET_API_KEY": DUMMY_KEY}
    return [str(binary), "exec", "--json", "--skip-git-repo-check", TASK], env


def opencode_config(base_url: str, model: str, provider: str = "openai-compatible") -> dict[str, object]:
    """OpenCode config for a target served as Chat Completions, or as Anthropic Messages (``anthropic``)."""
    npm = "@ai-sdk/anthropic" if provider == "anthropic" else "@ai-sdk/openai-compatible"
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "target": {
                "npm": npm,
                "name": "target",
                "options": {"baseURL": f"{base_url}/v1", "apiKey": DUMMY_KEY},
                "models": {model: {"name": model, "tool_call": True}},
            }
        },
        "model": f"target/{model}",
        "small_model": f"target/{model}",
        "autoupdate": False,
        "share": "disabled",
    }


def opencode_command(
    binary: Path, base_url: str, home: Path, model: str, provider: str = "openai-compatible"
) -> tuple[list[str], dict[str, str]]:
    config_dir = home / ".config" / "opencode"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "opencode.json").write_text(
        json.dumps(opencode_config(base_url, model, provider), indent=1)
    )
    # OpenCode starts a background `npm install @opencode-ai/plugin` into its config dir; offline npm makes
    # that fail at once (a logged warning) instead of reaching the registry.
    (home / ".npmrc").write_text("offline=true\n")
    env = _base_env(home) | {
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # do not read a ~/.claude of the host
    }
    return [str(binary), "run", "--format", "json", "--auto", TASK], env


def run_agent(
    agent: str,
    binary: Path,
    base_url: str,
    root: Path,
    *,
    model: str = "scripted",
    timeout: float = 300.0,  # OpenCode alone needs ≈ 12 s of CPU; a loaded 2-core machine stretches that
    provider: str | None = None,
    env_overrides: dict[str, str | None] | None = None,
) -> AgentRun:
    """Run one CLI headless in ``root/work`` with home ``root/home``; stdin closed (codex waits otherwise).

    ``env_overrides`` sets variables, or removes those given as None (e.g. to capture default traffic).
    """
    home, workdir = root / "home", root / "work"
    home.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    # A git repo bounds OpenCode's upward search for project config (it would read e.g. /tmp/opencode.json
    # left by anyone) and is what the agents expect to work in.
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    builders = {"claude-code": claude_command, "codex": codex_command}
    if provider is not None and agent != "opencode":
        raise ValueError("only OpenCode takes a provider (openai-compatible or anthropic)")
    if agent == "opencode":
        cmd, env = opencode_command(
            binary, base_url.rstrip("/"), home, model, provider or "openai-compatible"
        )
    else:
        cmd, env = builders[agent](binary, base_url.rstrip("/"), home, model)
    for key, value in (env_overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    started = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
    return AgentRun(agent, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started, workdir)
