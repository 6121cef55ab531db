"""The parity gate's checks on our side alone (trainer/parity_features.py), on tiny-qwen3 with real drafters:
the export of a drafter is the drafter (bf16 rounding only); an export whose taps were moved one layer late
is not, though the weights are the same; an overfit drafter depends on its taps and an untrained one does
not — the case where the engine comparison (b) is blind and the gate must say inconclusive."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lm import Target
from tests.support.tiny import BLOCK
from trainer.dflash.config import make_draft_config, resolve_mask_token
from trainer.dflash.model import DFlashDraftModel
from trainer.evaluate import Prompt
from trainer.export import export
from trainer.parity_cli import _features_line
from trainer.parity_features import early, feature_checks, late

MAX_TOKENS = 12


def _run(folder: Path, drafter: Path) -> Path:
    """A run folder as `make train` leaves it: the drafter as trained and its export."""
    (folder / "drafter").parent.mkdir(parents=True, exist_ok=True)
    if not (folder / "drafter").exists():
        (folder / "drafter").symlink_to(drafter)
    export(folder, folder / "export")
    return folder


@pytest.fixture(scope="module")
def prompts(tiny_rows: list[dict]) -> list[Prompt]:  # type: ignore[type-arg]
    return [Prompt(r["prompt_token_ids"], r["agent"], r["lang"], r["session_id"]) for r in tiny_rows]


@pytest.fixture(scope="module")
def trained_run(tiny_drafter: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared drafter, overfit (80 steps) so hard that a planted tap shows on more blocks than chance allows."""
    return _run(tmp_path_factory.mktemp("trained"), tiny_drafter)


def test_the_export_is_the_drafter_and_the_drafter_sees_its_taps(
    tiny: Target, trained_run: Path, prompts: list[Prompt]
) -> None:
    report = feature_checks(trained_run, tiny, prompts, MAX_TOKENS, mal_gap=0.05)
    fidelity, sensitivity = report["fidelity"], report["sensitivity"]
    assert report["ok"], report
    assert 0 < fidelity["relative_distance"] < 0.02  # bf16 weights: rounding, not zero
    assert fidelity["declared_differently"] == {}
    assert fidelity["blocks"] == len(prompts) * (MAX_TOKENS - 1)
    assert fidelity["teacher_forced_acceptance"]["trained"] > 1.2  # overfit (briefly) on these continuations
    assert sensitivity["sensitive"], sensitivity
    assert sensitivity["better_elsewhere"] == []
    assert sensitivity["relative_change"]["scrambled"] < -0.05  # it reads its context
    assert all(sensitivity["relative_change"][k] < 0.05 for k in ("early", "late"))  # its own taps are best
    assert "INSENSITIVE" not in _features_line(report)
    assert ": ok" in _features_line(report)


def test_an_export_with_taps_planted_one_layer_late_fails(
    tiny: Target, trained_run: Path, prompts: list[Prompt], tmp_path: Path
) -> None:
    run = _run(tmp_path, trained_run / "drafter")
    config = json.loads((run / "export" / "config.json").read_text())
    taps = config["dflash_config"]["target_layer_ids"]
    config["dflash_config"]["target_layer_ids"] = late(taps, tiny.num_layers)
    (run / "export" / "config.json").write_text(json.dumps(config))
    report = feature_checks(run, tiny, prompts, MAX_TOKENS, mal_gap=0.05)
    assert not report["ok"]
    assert report["fidelity"]["relative_distance"] > 0.05
    assert report["fidelity"]["declared_differently"] == {"taps": [taps, late(taps, tiny.num_layers)]}
    assert not report["fidelity"]["ok"]
    assert "early" in report["sensitivity"]["better_elsewhere"]  # the weights know where they were trained
    assert "FAILED" in _features_line(report)


def test_a_drafter_declaring_taps_it_was_not_trained_on_fails_though_both_configs_agree(
    tiny: Target, trained_run: Path, prompts: list[Prompt], tmp_path: Path
) -> None:
    """The planted tap is in the drafter's own config as well as the export's: nothing to compare but the
    weights, which accept more one layer early, on the taps they were trained on."""
    drafter = tmp_path / "planted"
    shutil.copytree(trained_run / "drafter", drafter)
    config = json.loads((drafter / "config.json").read_text())
    taps = config["dflash_config"]["target_layer_ids"]
    config["dflash_config"]["target_layer_ids"] = late(taps, tiny.num_layers)
    (drafter / "config.json").write_text(json.dumps(config))
    report = feature_checks(_run(tmp_path / "run", drafter), tiny, prompts, MAX_TOKENS, mal_gap=0.05)
    assert report["fidelity"]["ok"]  # the export is faithful to what the config says
    assert not report["ok"]
    assert "early" in report["sensitivity"]["better_elsewhere"]
    assert "accepts more on the early" in _features_line(report)


def test_an_untrained_drafter_is_blind_to_its_taps(
    tiny: Target, prompts: list[Prompt], tmp_path: Path
) -> None:
    mask_id, _ = resolve_mask_token(tiny.tokenizer, tiny.embed_tokens.weight.shape[0])
    cfg = make_draft_config(tiny.model.config, num_hidden_layers=1, block_size=BLOCK, mask_token_id=mask_id)
    run = _run(tmp_path, DFlashDraftModel(cfg).save(tmp_path / "untrained"))
    report = feature_checks(run, tiny, prompts, MAX_TOKENS, mal_gap=0.05)
    assert report["ok"]  # its export is faithful: it is just useless
    assert not report["sensitivity"]["sensitive"]
    assert report["sensitivity"]["relative_change"]["scrambled"] >= -0.05
    assert report["sensitivity"]["better_elsewhere"] == []  # it reads nothing, anywhere
    assert "INSENSITIVE" in _features_line(report)


def test_a_tap_moves_one_layer_and_stays_in_range() -> None:
    assert late([1, 5, 9], 12) == [2, 6, 10]
    assert late([3, 11], 12) == [4, 10]
    assert early([0, 5], 12) == [1, 4]


def test_a_run_without_a_trained_drafter_is_skipped_not_passed_silently(
    tiny: Target, prompts: list[Prompt], tmp_path: Path
) -> None:
    report = feature_checks(tmp_path, tiny, prompts, MAX_TOKENS, mal_gap=0.05)
    assert "skipped" in report
    assert "drafter" in report["skipped"]
    assert "skipped" in _features_line(report)
