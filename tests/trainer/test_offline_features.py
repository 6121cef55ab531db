"""Offline features (`python -m trainer features`): the target run once over the training data, each shared
prefix stored once, in shards a killed run resumes and several processes split; training from them loads
only the weights the drafter shares with the target and gives the online losses on the same batches."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from lm.loading import load_shared_weights
from tests.support import REPO_ROOT, free_port
from tests.trainer.dflash.tiny import save_tiny, tiny_config, tiny_target, write_calls
from trainer import features as features_mod
from trainer.data import build as data_build
from trainer.data.units import session_units
from trainer.features import features
from trainer.sources.base import FeatureError
from trainer.sources.cache import CacheSource
from trainer.sources.select import make_source
from trainer.train import TrainConfig, train

TAPS = [0, 2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sessions of three calls whose later prompts re-render the previous completion's last token (as chat
    templates do): no exact-prefix merge, so each call is a sequence sharing its history with the last."""
    path = tmp_path_factory.mktemp("calls") / "calls.parquet"
    rows = pq.read_table(
        write_calls(tiny_target(layers=4), path, sessions=4, calls=3, new_tokens=12)
    ).to_pylist()
    for prev, row in itertools.pairwise(rows):
        if row["session_id"] == prev["session_id"]:
            end = len(prev["prompt_token_ids"]) + len(prev["completion_token_ids"]) - 1
            row["prompt_token_ids"][end] = 1 + row["prompt_token_ids"][end] % 200
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def config(model_dir: Path, calls: Path, runs: Path, **kw: Any) -> TrainConfig:
    return tiny_config(
        str(model_dir), calls, runs, **{"max_steps": 3, "anchors": 16, "target_layer_ids": TAPS, **kw}
    )


def shard_tensors(root: Path) -> dict[str, dict[str, torch.Tensor]]:
    out = {}
    for path in sorted(root.glob("shard-*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            out[path.name] = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    return out


def test_only_embed_tokens_and_lm_head_are_read(model_dir: Path) -> None:
    full = tiny_target(layers=4)
    light = load_shared_weights(str(model_dir))
    assert torch.equal(light.embed_tokens.weight, full.embed_tokens.weight)
    assert torch.equal(light.lm_head.weight, full.lm_head.weight)
    on_meta = [n for n, p in light.model.named_parameters() if p.device.type == "meta"]
    assert on_meta  # every decoder layer: never read, never allocated
    assert all(".layers." in n or n.endswith("norm.weight") for n in on_meta)
    assert light.num_layers == 4


def test_offline_training_gives_the_online_losses(model_dir: Path, calls: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    online = train(config(model_dir, calls, tmp_path / "runs", name="online"))
    made = features(config(model_dir, calls, tmp_path / "runs"), tmp_path / "features", dtype="float32")
    # each session's shared history is stored once: fewer positions than the sequences hold
    seqs = [
        s
        for split in ("train", "eval")
        for s in data_build.read(tmp_path / "features/data" / f"{split}.parquet")
    ]
    assert (
        made["tokens"] == sum(u.computed for u in session_units(seqs)) < sum(len(s.input_ids) for s in seqs)
    )
    assert made["dtype"] == "float32"
    assert made["written"] == len(made["shards"])
    offline = train(
        config(
            model_dir,
            calls,
            tmp_path / "runs",
            name="offline",
            feature_source="cache",
            feature_dir=str(tmp_path / "features"),
        )
    )

    def losses(run: Path) -> list[float]:
        return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]

    assert len(losses(online)) == 3
    assert losses(offline) == pytest.approx(losses(online), rel=1e-6)


def test_the_default_stores_bf16_and_serves_every_sequence_whole(
    model_dir: Path, calls: Path, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    made = features(config(model_dir, calls, tmp_path / "runs"), tmp_path / "f")
    assert made["dtype"] == "bfloat16"
    seqs = [s.input_ids for s in data_build.read(tmp_path / "f/data/train.parquet")]
    got = CacheSource(tmp_path / "f").taps_many(seqs, TAPS)
    target = tiny_target(layers=4)
    for ids, feats in zip(seqs, got, strict=True):  # rebuilt along the chain of shared prefixes
        want = target.tap(torch.tensor([ids]), TAPS)[0]
        assert feats.dtype == torch.bfloat16
        assert feats.shape == want.shape
        assert torch.allclose(feats.float(), want, atol=0.05 * float(want.abs().max()))
    # what a training step reads: only the positions past each segment's shared prefix
    starts = [0, *(min(len(a), len(b)) // 2 for a, b in itertools.pairwise(seqs))]
    tails = CacheSource(tmp_path / "f").taps_tails(seqs, starts, TAPS)
    assert all(torch.equal(t, f[a:]) for t, f, a in zip(tails, got, starts, strict=True))


def test_a_killed_run_resumes_without_recomputing_finished_shards(
    model_dir: Path, calls: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    cfg, out = config(model_dir, calls, tmp_path / "runs"), tmp_path / "f"
    first = features(cfg, out, batch=1, dtype="float32")  # one unit per shard
    names = [s["file"] for s in first["shards"]]
    assert len(names) >= 3
    before = {n: (out / n).stat().st_mtime_ns for n in names}
    (out / names[1]).unlink()  # as if killed while writing it: the rename never happened
    (out / f".{names[1]}.4242.1.tmp").write_bytes(b"partial")  # what the killed writer left
    (out / "manifest.json").unlink()
    forwards = []
    real = features_mod.unit_features
    monkeypatch.setattr(features_mod, "unit_features", lambda *a, **k: forwards.append(1) or real(*a, **k))
    again = features(cfg, out, batch=1, dtype="float32")
    assert (again["written"], again["skipped"]) == (1, len(names) - 1)
    assert len(forwards) == 1  # one unit recomputed, no other
    assert {n: (out / n).stat().st_mtime_ns for n in names if n != names[1]} == {
        n: t for n, t in before.items() if n != names[1]
    }
    assert again["entries"] == first["entries"]
    assert not list(out.glob(".*.tmp"))
    with pytest.raises(SystemExit, match="other data or settings"):  # never mixed with another plan
        features(cfg, out, batch=1, dtype="bfloat16")


def test_more_than_the_free_space_is_refused_without_force(
    model_dir: Path,
    calls: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(features_mod.shutil, "disk_usage", lambda _: usage._replace(free=1000))
    loaded: list[str] = []
    real = features_mod.load_target
    monkeypatch.setattr(
        features_mod, "load_target", lambda spec, **kw: loaded.append(spec) or real(spec, **kw)
    )
    cfg = config(model_dir, calls, tmp_path / "runs")
    with pytest.raises(SystemExit, match="pass --force"):
        features(cfg, tmp_path / "f")
    # the estimate came first (target tokens x taps x hidden x bytes of the dtype), before the target's
    # layers were read
    assert f"x {len(TAPS) * 64 * 2:,} bytes" in capsys.readouterr().out
    assert not loaded
    assert not list((tmp_path / "f").glob("shard-*"))
    assert features(cfg, tmp_path / "f", force=True)["written"] >= 1
    assert loaded == [str(model_dir)]


@pytest.mark.slow
def test_two_processes_write_disjoint_shards_equal_to_one_process(
    model_dir: Path, calls: Path, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    cfg = config(model_dir, calls, tmp_path / "runs")
    one = features(cfg, tmp_path / "one", batch=1, dtype="float32")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg.as_dict()))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        "-m",
        "trainer",
        "features",
        "--config",
        str(tmp_path / "cfg.yaml"),
        "--out",
        str(tmp_path / "two"),
        "--batch",
        "1",
        "--dtype",
        "float32",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    two = json.loads((tmp_path / "two" / "manifest.json").read_text())
    by_rank = [{s["file"] for s in two["shards"] if s["rank"] == r} for r in (0, 1)]
    assert by_rank[0]
    assert by_rank[1]
    assert not by_rank[0] & by_rank[1]  # both wrote, none twice
    a, b = shard_tensors(tmp_path / "one"), shard_tensors(tmp_path / "two")
    assert set(a) == set(b) == by_rank[0] | by_rank[1]
    for name in a:
        assert a[name].keys() == b[name].keys()
        assert all(torch.equal(a[name][k], b[name][k]) for k in a[name])
    assert two["entries"] == one["entries"]


def test_a_checkpoint_with_its_head_tied_to_the_embedding_loads_light(
    model_dir: Path, tmp_path: Path
) -> None:
    """SmolLM2 and the small Qwen3s store the tied head once, as the embedding."""
    tied = Path(shutil.copytree(model_dir, tmp_path / "tied"))
    tensors = load_file(tied / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, tied / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((tied / "config.json").read_text())
    (tied / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    light = load_shared_weights(str(tied))
    assert light.lm_head.weight is light.embed_tokens.weight
    assert torch.equal(light.embed_tokens.weight, tensors["model.embed_tokens.weight"])


def test_features_of_the_target_before_a_config_change_are_not_trained_on(
    model_dir: Path, calls: Path, tmp_path: Path
) -> None:
    """The target's config rewritten in place (plain RoPE → YaRN, as a cached SmolLM2 folder is): its stored
    features are refused by the cache source, and not taken as done by `trainer features`."""
    torch.set_num_threads(1)
    folder = Path(shutil.copytree(model_dir, tmp_path / "target"))
    before = load_shared_weights(str(folder)).fingerprint
    features(config(folder, calls, tmp_path / "runs"), tmp_path / "f", dtype="float32")
    CacheSource(tmp_path / "f", before)  # its own target's: read
    cfg = json.loads((folder / "config.json").read_text())
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "rope_theta": 1e4}
    (folder / "config.json").write_text(json.dumps({**cfg, "rope_scaling": yarn, "rope_parameters": yarn}))
    after = load_shared_weights(str(folder))
    assert after.fingerprint != before
    with pytest.raises(FeatureError, match="write them again"):
        make_source("cache", after, feature_dir=tmp_path / "f")
    with pytest.raises(SystemExit, match="other data or settings"):
        features(config(folder, calls, tmp_path / "runs"), tmp_path / "f", dtype="float32")
