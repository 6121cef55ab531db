"""The context check can fail: a drafter that reads the target's features is named so, and one whose
feature path is disconnected is named as ignoring its context — by `trainer eval` (real speculative
decoding with the features scrambled) and by the learning curve `make train` prints (held-out blocks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lm import Target
from tests.trainer.dflash.tiny import tiny_config, tiny_target, write_calls
from trainer.dflash.kinds import load_drafter
from trainer.dflash.model import DFlashDraftModel
from trainer.evaluate import Prompt, evaluate
from trainer.heldout import paired_context_verdict
from trainer.parity_probe import overfit_on
from trainer.train import train


def _prompts(rows: list[dict]) -> list[Prompt]:  # type: ignore[type-arg]
    return [Prompt(r["prompt_token_ids"], r["agent"], r["lang"], r["session_id"]) for r in rows]


def test_eval_names_a_drafter_that_reads_its_context_and_one_that_cannot(
    tiny: Target,
    tiny_rows: list[dict],  # type: ignore[type-arg]
    tiny_drafter: Path,
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    args = dict(target=tiny, prompts=_prompts(tiny_rows), max_new_tokens=12, progress=False)
    good = evaluate(run, drafter_dir=tiny_drafter, out_dir=tmp_path / "good", **args)
    assert good["lossless"]
    assert good["context"] == "reads its context"  # the shared overfit drafter: 4.0 against about 1.2
    assert good["context_gain_ci"][0] > 0
    assert good["tau_scrambled"] < good["tau"]

    # planted: the same training, with the features' projection held at zero (they never reach attention)
    drafter = DFlashDraftModel(load_drafter(tiny_drafter).config)
    torch.nn.init.zeros_(drafter.fc.weight)
    drafter.fc.weight.requires_grad_(False)
    pairs = [(r["prompt_token_ids"], r["completion_token_ids"]) for r in tiny_rows]
    torch.manual_seed(0)
    overfit_on(drafter, tiny, pairs, steps=20, lr=3e-2).save(tmp_path / "cut")
    cut = evaluate(run, drafter_dir=tmp_path / "cut", out_dir=tmp_path / "cutout", **args)
    assert cut["lossless"]
    assert cut["context"] == "IGNORES ITS CONTEXT"
    assert cut["tau_scrambled"] == cut["tau"]  # nothing it reads changed
    assert json.loads((tmp_path / "cutout" / "eval.json").read_text())["context"] == "IGNORES ITS CONTEXT"


@pytest.fixture(scope="module")
def small() -> Target:
    return tiny_target(layers=4)


def test_the_learning_curve_names_a_disconnected_feature_path(
    small: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Training with the features zeroed before the drafter's attention: every held-out point, the
    summary and the line `make train` prints say the drafter ignores its context."""
    calls = write_calls(small, tmp_path / "calls.parquet", sessions=5, calls=2, new_tokens=20)
    monkeypatch.setattr(
        DFlashDraftModel,
        "project_context",
        lambda self, taps: torch.zeros_like(self.hidden_norm(self.fc(taps))),
    )
    cfg = tiny_config("tiny", calls, tmp_path / "runs", name="cut", max_steps=4, eval_every=2, anchors=32)
    run = train(cfg, target=small)
    points = [json.loads(x) for x in (run / "heldout.jsonl").read_text().splitlines()]
    assert [p["step"] for p in points] == [2, 4]
    assert all(p["blocks"] > 0 for p in points)
    assert all(p["context"] == "IGNORES ITS CONTEXT" and p["tau"] == p["tau_scrambled"] for p in points)
    assert json.loads((run / "train_summary.json").read_text())["heldout"]["context"] == "IGNORES ITS CONTEXT"
    out = capsys.readouterr().out
    assert "held-out @ step 4" in out
    assert "the drafter IGNORES ITS CONTEXT" in out


def test_the_verdict_resamples_sessions_and_says_when_there_are_too_few() -> None:
    reads = paired_context_verdict({f"s{i}": [0.4, 0.6, 0.5] for i in range(4)})
    assert reads["context"] == "reads its context"
    assert reads["context_resampled"] == "session"
    assert reads["context_gain"] == pytest.approx(0.5)
    assert paired_context_verdict({"s0": [0.0, 0.0], "s1": [0.0]})["context"] == "IGNORES ITS CONTEXT"
    mixed = paired_context_verdict({"s0": [1.0], "s1": [-0.9], "s2": [0.2], "s3": [-0.1]})
    assert mixed["context"] == "not resolved"  # a positive mean whose interval holds 0
    few = paired_context_verdict(
        {"s0": [0.5, 0.25, 0.75], "s1": [0.5, 0.5]}
    )  # two sessions: no sample of them
    assert few["context_resampled"] == "block"
    assert few["context_units"] == 2
    assert few["context"] == "reads its context"
