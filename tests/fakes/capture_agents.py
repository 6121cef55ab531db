"""Capture what the real agent CLIs send, into ``tests/fixtures/agents/<agent>/``.

    python -m tests.fakes.capture_agents [--out tests/fixtures/agents]

Runs each pinned CLI headless against the scripted upstream started with ``--record-dir`` and keeps, per
agent, the first main request (tools offered, no tool result), the request that carries the tool result,
any side call (no tools) and the CLI's own JSON transcript. Secrets are redacted by the recorder; nothing
else is edited, so the fixtures are real captures (re-run this after bumping a CLI pin).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from sandboxes.agents.npm_install import AGENT_PACKAGES, ensure_installed
from tests.fakes import agent_runs
from tests.fakes.scripted_upstream import SPECS
from tests.support import REPO_ROOT, background, free_port

# fixture directory -> (agent CLI, upstream --apis, run_agent keyword options)
CAPTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "claude-code": ("claude-code", "all", {}),
    # without CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC Claude Code first probes `HEAD /api/hello`
    "claude-code-default-traffic": (
        "claude-code",
        "all",
        {"env_overrides": {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": None}},
    ),
    "codex": ("codex", "all", {}),
    "opencode": ("opencode", "chat", {}),
    "opencode-anthropic": ("opencode", "all", {"provider": "anthropic"}),
}
API_BY_PATH = {"/v1/messages": "messages", "/v1/responses": "responses", "/v1/chat/completions": "chat"}


def classify(record: dict[str, Any]) -> str | None:
    """Name a recorded request: first_request, tool_result_request, side_request, probe_request or None."""
    if record["method"] in ("HEAD", "GET") and record["path"] not in ("/health", "/v1/models"):
        return "probe_request"
    api = API_BY_PATH.get(record["path"])
    body = record.get("body")
    if api is None or not isinstance(body, dict):
        return None
    if not body.get("tools"):
        return "side_request"
    return "tool_result_request" if SPECS[api].tool_result(body) else "first_request"


def capture(name: str, binaries: dict[str, Path], out: Path) -> dict[str, Any]:
    agent, apis, options = CAPTURES[name]
    with tempfile.TemporaryDirectory(prefix=f"capture-{name}-") as tmp:
        root, record_dir = Path(tmp), Path(tmp) / "requests"
        port = free_port()
        args = ["-m", "tests.fakes.scripted_upstream", "--port", str(port), "--apis", apis]
        with background([*args, "--record-dir", str(record_dir)], f"http://127.0.0.1:{port}/health"):
            url = f"http://127.0.0.1:{port}"
            run = agent_runs.run_agent(agent, binaries[agent], url, root, **options)
        if run.returncode != 0 or not run.proof.exists():
            raise RuntimeError(f"{name}: CLI failed (rc={run.returncode}):\n{run.stderr[-2000:]}")
        target = out / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        kept: dict[str, Any] = {}
        for path in sorted(record_dir.glob("*.json")):
            record = json.loads(path.read_text())
            kind = classify(record)
            if kind is None or kind in kept:
                continue
            package, version, _ = AGENT_PACKAGES[agent]
            record = {"agent": agent, "cli": f"{package}@{version}", "options": options, **record}
            record["received_at"] = None  # keeps re-captures diff-friendly
            (target / f"{kind}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
            kept[kind] = record
        (target / "transcript.jsonl").write_text(run.stdout)
        calls = len(list(record_dir.glob("*.json")))
        print(f"{name}: rc={run.returncode} {run.seconds:.1f}s, {calls} calls, kept {sorted(kept)}")
        return kept


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "fixtures" / "agents")
    parser.add_argument("--only", nargs="*", choices=sorted(CAPTURES), default=sorted(CAPTURES))
    args = parser.parse_args()
    binaries = ensure_installed(REPO_ROOT / ".cache" / "agents")
    for name in args.only:
        capture(name, binaries, args.out)


if __name__ == "__main__":
    main()
