"""`harvest` redacts a secret inside exact token ids with the tokenizer of what the target serves.

The chain is real except the agents: a vLLM CPU server of tiny-qwen3 (Qwen3's real tokenizer and template,
random weights, from its cached folder) behind the real proxy, and scripted sessions (`--runner fake`, no Docker) that send each
issue's task as an agent would. A secret planted in every issue body reaches the target inside the
prompt's token ids; the export must cut it out of those ids (not drop them) with the tokenizer named by
the stand-in's /v1/models `root`."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy import select, update
from transformers import AutoTokenizer

from factory.db import Issue, Translation, connect, default_url, session_factory
from factory.harvest import HarvestOptions, run_harvest
from factory.ingest import sample
from records.io import read_table

pytestmark = [pytest.mark.slow, pytest.mark.vllm]  # starts vLLM (eager) and three sessions

SECRET = "ghp_PLANTEDgithubToken0123456789abcdefgh"


def test_harvest_keeps_exact_ids_and_cuts_a_secret_out_of_them(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sessions = session_factory(connect(default_url(data)))
    sample.install(sessions, data / "sample-repos")
    with sessions.begin() as s:
        for table in (Issue, Translation):
            s.execute(update(table).values(body=table.body + f"\n\nCI uses the token {SECRET} to push."))
        assert s.scalar(select(Issue.body)).endswith("to push.")

    opts = HarvestOptions(
        data_dir=data,
        runner="fake",
        target_model="tiny-qwen3",
        target_arg=["--no-compile"],  # eager: a fresh machine has no compile cache (minutes to fill)
        limit=3,
        held_out=0.0,
        translate_limit=0,
    )
    with (tmp_path / "console.txt").open("w") as fh:
        summary = run_harvest(opts, Console(file=fh, width=200))

    tokenizer = str(summary["tokenizer"])
    assert Path(tokenizer, "tokenizer.json").is_file()  # the served folder holds Qwen3's tokenizer
    exp = summary["export"]
    assert exp["exact_ids_fraction"] == 1.0
    assert exp["token_ids_dropped"] == 0
    rows = read_table(data / "dataset").to_pylist()
    assert rows
    assert exp["ids_redacted"] == len(rows)
    tok = AutoTokenizer.from_pretrained(tokenizer)
    for row in rows:
        assert row["ids_redacted"] is True
        assert row["prompt_token_ids"]
        assert row["ids_exact"]
        prompt = tok.decode(row["prompt_token_ids"], skip_special_tokens=False)
        assert SECRET not in prompt
        assert SECRET not in row["request_json"]
        assert "<REDACTED:github_token>" in prompt
        assert "to push." in prompt  # the rest of the task is what the target saw
    assert "calls keeping exact ids: 100.0%" in (tmp_path / "console.txt").read_text()


def test_a_named_tokenizer_that_does_not_load_stops_the_harvest_before_it_starts(tmp_path: Path) -> None:
    opts = HarvestOptions(data_dir=tmp_path / "data", runner="fake", tokenizer=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="--tokenizer"):
        run_harvest(opts, Console(file=(tmp_path / "console.txt").open("w")))
    assert not (tmp_path / "data" / "factory.db").exists()  # nothing ran
