"""The run config: one pydantic model; YAML, --set overrides and generated options merged and validated."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from trainer.cli import app
from trainer.config import ConfigError, TrainConfig


def test_yaml_strings_that_are_numbers_validate_as_numbers(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-4\nepochs: 2\n")  # YAML 1.1 reads 1e-4 as the string "1e-4"
    c = TrainConfig.load(path)
    assert c.lr == 1e-4
    assert isinstance(c.lr, float)


def test_bad_values_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config key block_size: .*greater than or equal to 2"):
        TrainConfig.load(None, ["block_size=1"])
    with pytest.raises(ConfigError, match="config key mixed_precision"):
        TrainConfig.load(None, ["mixed_precision=fp8"])
    with pytest.raises(ConfigError, match="unknown config keys: blocksize, lrate"):
        TrainConfig.load(None, ["blocksize=8", "lrate=1"])
    with pytest.raises(ConfigError, match="not key=value"):
        TrainConfig.load(None, ["lr"])


def test_explicit_options_win_over_set_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"lr": 0.1, "epochs": 3, "block_size": 8}))
    c = TrainConfig.load(path, ["lr=0.2", "epochs=4"], {"lr": 0.3})
    assert (c.lr, c.epochs, c.block_size) == (0.3, 4, 8)


def test_train_command_options_are_generated_from_the_model() -> None:
    train = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    flags = {opt for p in train.params for opt in p.opts}
    nested = {"launch", "vllm"}  # mappings and sub-models: set with --set key.sub=value or the file
    for field in TrainConfig.model_fields:
        if field not in nested:
            assert "--" + field.replace("_", "-") in flags, field
    assert {"--config", "--set", "--no-resume"} <= flags


def test_train_command_rejects_bad_input_before_training(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["train", "--lr", "fast", "--runs-dir", str(tmp_path)])
    assert bad.exit_code == 2
    assert "--lr" in bad.output
    unknown = runner.invoke(app, ["train", "--set", "blocksize=4", "--runs-dir", str(tmp_path)])
    assert unknown.exit_code == 2
    assert "unknown config keys: blocksize" in unknown.output
    assert not any(tmp_path.iterdir())  # nothing was started


def test_every_shipped_config_validates() -> None:
    # found beside the package, not the working directory, and never zero files (a glob of nothing passes)
    shipped = sorted((Path(__file__).parents[2] / "trainer" / "configs").glob("*.yaml"))
    assert {p.name for p in shipped} >= {"cpu.yaml", "train.yaml"}
    for path in shipped:
        TrainConfig.load(path)
