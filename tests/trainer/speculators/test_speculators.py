"""speculators interop: the data folder read back with `datasets`, the checkpoint round trip, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from datasets import load_from_disk
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config
from typer.testing import CliRunner

from tests.trainer.dflash.tiny import MASK, tiny_target
from trainer.cli import app
from trainer.dflash.config import make_draft_config
from trainer.dflash.model import DFlashDraftModel
from trainer.speculators.checkpoint import from_speculators, to_speculators
from trainer.speculators.data import train_ratio


def drafter_dir(tmp: Path) -> Path:
    target = tiny_target(layers=6)
    cfg = make_draft_config(
        target.model.config, num_hidden_layers=2, block_size=8, mask_token_id=MASK, target_layer_ids=[1, 4]
    )
    torch.manual_seed(0)
    return DFlashDraftModel(cfg).save(tmp / "drafter", dtype=torch.bfloat16)


def test_export_to_speculators_and_back_gives_identical_tensors_and_config(tmp_path: Path) -> None:
    src = drafter_dir(tmp_path)
    target = tiny_target(layers=6)
    shared = {
        "embed_tokens.weight": target.embed_tokens.weight.detach().to(torch.bfloat16),
        "lm_head.weight": target.lm_head.weight.detach().to(torch.bfloat16),
    }
    spec = to_speculators(src, tmp_path / "spec", verifier="tiny", shared=shared)
    cfg = json.loads((spec / "config.json").read_text())
    assert cfg["speculators_model_type"] == "dflash"
    assert cfg["aux_hidden_state_layer_ids"] == [2, 5]  # vLLM numbering, no final layer
    assert cfg["transformer_layer_config"]["num_hidden_layers"] == 2
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 7
    assert "embed_tokens.weight" in load_file(str(spec / "model.safetensors"))
    back = from_speculators(spec, tmp_path / "back")
    assert json.loads((back / "config.json").read_text()) == json.loads((src / "config.json").read_text())
    a, b = load_file(str(src / "model.safetensors")), load_file(str(back / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    DFlashDraftModel.load(back)  # and it loads as a drafter


def _spec(tmp: Path, **config: object) -> Path:
    spec = to_speculators(drafter_dir(tmp), tmp / "spec", verifier="tiny")
    cfg = json.loads((spec / "config.json").read_text())
    for k, v in config.items():
        if k.startswith("layer."):
            cfg["transformer_layer_config"][k.removeprefix("layer.")] = v
        else:
            cfg[k] = v
    (spec / "config.json").write_text(json.dumps(cfg))
    return spec


def test_a_pruned_vocabulary_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, draft_vocab_size=128)
    with pytest.raises(ValueError, match="pruned"):
        from_speculators(spec, tmp_path / "out")
    spec2 = _spec(tmp_path / "b")
    state = load_file(str(spec2 / "model.safetensors"))
    save_file({**state, "d2t": torch.arange(4)}, str(spec2 / "model.safetensors"))
    with pytest.raises(ValueError, match="pruned"):
        from_speculators(spec2, tmp_path / "out2")


def test_sliding_window_and_dspark_drafts_are_refused(tmp_path: Path) -> None:
    sliding = _spec(tmp_path, **{"layer.layer_types": ["sliding_attention", "full_attention"]})
    with pytest.raises(ValueError, match="sliding-window"):
        from_speculators(sliding, tmp_path / "o1")
    with pytest.raises(ValueError, match="sample_from_anchor"):
        from_speculators(_spec(tmp_path / "d", sample_from_anchor=True), tmp_path / "o2")


def test_import_without_the_target_depth_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, dflash_factory=None)
    with pytest.raises(ValueError, match="num_target_layers"):
        from_speculators(spec, tmp_path / "out")
    assert json.loads((from_speculators(spec, tmp_path / "ok", 6) / "config.json").read_text())[
        "dflash_config"
    ]["target_layer_ids"] == [1, 4]  # tap ids = aux ids − 1


def test_train_ratio_reproduces_the_split_with_speculators_expression() -> None:
    for n_train in range(1, 50):
        for n_eval in range(1, 7):
            r = train_ratio(n_train, n_train + n_eval)
            assert 0 < r < 1  # speculators refuses 1.0 (its validation split would be empty)
            assert int((n_train + n_eval) * r) == n_train
    with pytest.raises(ValueError, match="both splits"):
        train_ratio(5, 5)


def test_with_nothing_held_out_a_copy_of_the_last_training_row_validates(tmp_path: Path) -> None:
    data = tmp_path / "run" / "data"
    data.mkdir(parents=True)
    seqs = [([1, 2, 3, 4], [0, 0, 1, 1]), ([5, 6, 7], [0, 1, 1])]
    table = pa.table(
        {"input_ids": [s for s, _ in seqs], "loss_mask": [m for _, m in seqs], "split": ["train"] * 2}
    )
    pq.write_table(table, data / "train.parquet")
    out = tmp_path / "spec-data"
    result = CliRunner().invoke(app, ["export-speculators", str(tmp_path / "run"), str(out)])
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "dflash_factory.json").read_text())
    assert meta["validation_is_a_training_copy"] is True
    assert 0 < meta["train_data_ratio"] < 1
    ds = load_from_disk(str(out))
    n_train = int(len(ds) * meta["train_data_ratio"])  # speculators' split of the rows, in order
    assert ds["input_ids"][:n_train] == [[1, 2, 3, 4], [5, 6, 7]]  # every training row trains
    assert ds["input_ids"][n_train:] == [[5, 6, 7]]  # and the validation split is not empty


def test_export_speculators_writes_train_then_eval_rows_read_back_by_datasets(tmp_path: Path) -> None:
    data = tmp_path / "run" / "data"
    data.mkdir(parents=True)
    rows = {
        "train": [([1, 2, 3, 4], [0, 0, 1, 1]), ([5, 6, 7], [0, 1, 1])],
        "eval": [([9, 9, 8, 8, 7], [0, 0, 0, 1, 1])],
    }
    for split, seqs in rows.items():
        table = pa.table(
            {
                "input_ids": [s for s, _ in seqs],
                "loss_mask": [m for _, m in seqs],
                "split": [split] * len(seqs),
            }
        )
        pq.write_table(table, data / f"{split}.parquet")
    out = tmp_path / "spec-data"
    result = CliRunner().invoke(app, ["export-speculators", str(tmp_path / "run"), str(out)])
    assert result.exit_code == 0, result.output
    assert "--train-data-ratio 0.8333333333333334" in result.output
    ds = load_from_disk(str(out))
    assert ds.column_names == ["input_ids", "loss_mask", "seq_len"]
    assert ds["input_ids"] == [[1, 2, 3, 4], [5, 6, 7], [9, 9, 8, 8, 7]]
    assert ds["loss_mask"] == [[0, 0, 1, 1], [0, 1, 1], [0, 0, 0, 1, 1]]
    assert ds["seq_len"] == [4, 3, 5]
    ds.set_format("torch")  # as speculators reads it
    assert ds[0]["input_ids"].dtype == torch.int64
    meta = json.loads((out / "dflash_factory.json").read_text())
    assert int(meta["rows"] * meta["train_data_ratio"]) == 2
    again = CliRunner().invoke(app, ["export-speculators", str(tmp_path / "run"), str(out)])
    assert again.exit_code != 0  # a non-empty output directory is never overwritten


def test_import_speculators_replaces_the_runs_drafter_and_keeps_the_old_one(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    drafter_dir(tmp_path / "x").rename(run / "drafter")
    spec = to_speculators(run / "drafter", tmp_path / "spec", verifier="tiny")
    result = CliRunner().invoke(app, ["import-speculators", str(spec), str(run)])
    assert result.exit_code == 0, result.output
    assert "taps [1, 4]" in result.output
    kept = list(run.glob("drafter.before-import-*"))
    assert len(kept) == 1
    assert json.loads((run / "drafter" / "config.json").read_text()) == json.loads(
        (kept[0] / "config.json").read_text()
    )
    bad = _spec(tmp_path / "p", draft_vocab_size=128)
    refused = CliRunner().invoke(app, ["import-speculators", str(bad), str(run)])
    assert refused.exit_code == 2
    assert "pruned" in refused.output
    assert len(list(run.glob("drafter.before-import-*"))) == 1  # a refused import touches nothing


def test_a_diff_style_layer_config_imports_complete(tmp_path: Path) -> None:
    # speculators saves transformer_layer_config with to_diff_dict(): Qwen3's defaults are left out
    src = drafter_dir(tmp_path)
    spec = to_speculators(src, tmp_path / "spec", verifier="tiny")
    cfg = json.loads((spec / "config.json").read_text())
    defaults = Qwen3Config().to_dict()
    layer = cfg["transformer_layer_config"]
    cfg["transformer_layer_config"] = {
        k: v for k, v in layer.items() if k == "model_type" or defaults.get(k) != v
    }
    assert len(cfg["transformer_layer_config"]) < len(layer)
    (spec / "config.json").write_text(json.dumps(cfg))
    back = from_speculators(spec, tmp_path / "back")
    assert json.loads((back / "config.json").read_text()) == json.loads((src / "config.json").read_text())
