"""`make harvest` on the embedded default, for real: bundled sample, CPU stand-in target, proxy,
Docker sandboxes running the three real agent CLIs, export. Slow: two rounds of three sessions, each cut at 180 s (≈ 8–10 min on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from records.io import read_table

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.cli
def test_make_harvest_on_the_embedded_default(tmp_path):
    data = tmp_path / "data"
    # MAKEFLAGS/MAKELEVEL: under `make test` this make is nested and would print "Leaving directory" last.
    drop = ("TARGET_URL", "GITHUB_TOKEN", "DFLASH_DB_URL", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HF_DATASETS_OFFLINE"] = env["HF_HUB_OFFLINE"] = "1"
    r = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "harvest",
            f"DATA_DIR={data}",
            "HARVEST_ARGS=--limit 6 --concurrency 3 --session-timeout 180",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert r.returncode == 0, (r.stdout[-4000:], r.stderr[-4000:])
    summary = json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])
    assert summary["run"]["done"] + summary["run"]["infra_failed"] == 6
    assert "harvest done" in r.stderr

    import datasets

    out = data / "dataset"
    sessions = datasets.load_dataset(str(out), "sessions", cache_dir=str(tmp_path / "hf"))
    calls = datasets.load_dataset(str(out), "calls", cache_dir=str(tmp_path / "hf"))
    srows = [row for split in sessions for row in sessions[split]]
    assert sum(len(calls[split]) for split in calls) > 0
    crows = read_table(out).to_pylist()  # records.io gives request bodies whole (stored as deltas)
    assert {(s["agent"], s["lang"]) for s in srows} == {
        (a, lang) for a in ("claude-code", "codex", "opencode") for lang in ("en", "ko")
    }
    # real model calls, recorded by the proxy, from all three agents and in both languages
    assert {c["agent"] for c in crows} == {"claude-code", "codex", "opencode"}
    assert {c["lang"] for c in crows} == {"en", "ko"}
    assert all(c["request_json"] and c["api"] in ("anthropic_messages", "openai_responses", "openai_chat",
                                                   "anthropic_count_tokens") for c in crows)  # fmt: skip
    assert {c["client_agent"] for c in crows} >= {"claude-code", "codex", "opencode"}
    assert any("이슈" in c["request_json"] for c in crows if c["lang"] == "ko")
    assert (out / "README.md").read_text().count("config_name") == 2
