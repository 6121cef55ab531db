"""Drafter kinds are a registry (`trainer.dflash.kinds.KINDS`, like `wire.API_SHAPES`): every stage looks a
kind up there, nothing branches on a kind's name, and the run config accepts exactly the registered kinds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.trainer.dflash.tiny import MASK, tiny_target
from trainer.config import TrainConfig
from trainer.dflash.config import make_draft_config
from trainer.dflash.kinds import KINDS
from trainer.drafting import kind_config

ROOT = Path(__file__).resolve().parents[3]
BRANCH = re.compile(r"""[=!]= ["'](dflash|dflash2|dspark)["']|in \(["'](dflash|dflash2|dspark)["']""")


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_configures_its_own_architecture(name: str) -> None:
    cfg = TrainConfig(target="tiny", drafter=name, num_layers=1, block_size=4)
    base = make_draft_config(
        tiny_target(layers=4).model.config, num_hidden_layers=1, block_size=4, mask_token_id=MASK
    )
    made = kind_config(cfg, base)
    assert (made.architectures or ["DFlashDraftModel"])[0] == KINDS[name].architecture
    KINDS[name].model(made)  # and it builds
    assert name in TrainConfig.model_fields["drafter"].description


def test_the_config_takes_exactly_the_registered_kinds() -> None:
    with pytest.raises(ValidationError, match="one of dflash, dflash2, dspark"):
        TrainConfig(target="tiny", drafter="eagle3")


def test_no_module_branches_on_a_kinds_name() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in ("trainer", "serving", "factory", "benchmarks")
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if BRANCH.search(line) and "speculators_model_type" not in line  # speculators' own names
    ]
    assert found == []
