"""train -> eval -> export on the tiny target, in-process: run layout, resume, SIGTERM, the export format."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from safetensors import safe_open

from tests.trainer.dflash.test_model import expected_shapes
from tests.trainer.dflash.tiny import MASK, tiny_config, tiny_target, write_calls
from trainer import evaluate as evaluate_mod
from trainer import train as train_mod
from trainer.dflash.config import REQUIRED_KEYS
from trainer.evaluate import evaluate
from trainer.export import export
from trainer.ranks import accelerator
from trainer.train import TrainConfig, latest_checkpoint, train


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():  # type: ignore[no-untyped-def]
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a second thread only adds barrier waits
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    return tiny_target(layers=4)


@pytest.fixture(scope="module")
def calls(tmp_path_factory, target) -> Path:  # type: ignore[no-untyped-def]
    return write_calls(
        target, tmp_path_factory.mktemp("calls") / "calls.parquet", sessions=5, calls=2, new_tokens=20
    )


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def cfg(tmp: Path, calls: Path, **over) -> TrainConfig:  # type: ignore[no-untyped-def]
    base = dict(name="t", epochs=2, anchors=32, eval_prompts=2, eval_max_new_tokens=12)
    return tiny_config("tiny", calls, tmp / "runs", **{**base, **over})


def test_config_loads_yaml_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"target": "smollm2", "block_size": 8, "launch": {"nodes": 1, "k8s": {"cpu": "4"}}})
    )
    c = TrainConfig.load(path, ["lr=1e-4", "target_layer_ids=[1, 5]", "launch.nodes=4"])
    assert c.block_size == 8
    assert c.lr == 1e-4
    assert c.target_layer_ids == [1, 5]
    assert c.launch.nodes == 4
    assert c.launch.k8s.cpu == "4"
    assert c.launch.k8s.memory == "128Gi"  # the rest: the documented defaults
    with pytest.raises(ValueError, match="unknown config keys"):
        TrainConfig.load(None, ["blocksize=8"])
    for name in ("cpu.yaml", "train.yaml"):  # the shipped configs are valid
        TrainConfig.load(Path("trainer/configs") / name)


def test_train_eval_export_end_to_end(tmp_path: Path, calls: Path, target, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    run = train(cfg(tmp_path, calls), argv=["-m", "trainer", "train"], target=target)
    assert run == tmp_path / "runs" / "t"
    assert (tmp_path / "runs" / "latest").resolve() == run.resolve()
    for name in ("config.yaml", "command.txt", "metrics.jsonl", "train_summary.json", "data/report.json"):
        assert (run / name).exists(), name
    assert "trainer train" in (run / "command.txt").read_text()
    report = json.loads((run / "data" / "report.json").read_text())
    assert report["merge"]["sequences"] == 5
    assert report["merge"]["reduction"] > 1.0
    assert report["split"]["eval"]["sequences"] > 0
    assert report["split"]["train"]["sequences"] > 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics
    assert len(metrics[-1]["acc"]) == 3
    assert latest_checkpoint(run) is not None

    result = evaluate(run, target=target, progress=False)
    assert result["lossless"] is True
    # the counters agree with each other: vLLM's MAL is 1 + the per-position acceptances, and tau
    # (tokens per verify) lies between 1 and the block
    mal = 1 + sum(result["per_position_acceptance"])
    assert result["acceptance_length"] == pytest.approx(mal, abs=1e-3)
    assert 1.0 <= result["tau"] <= 4
    assert result["n_prompts"] == 2
    assert len(result["per_position_acceptance"]) == 3
    assert set(result["tau_by_agent"]) <= {"claude-code", "codex"}
    on_disk = json.loads((run / "eval.json").read_text())
    for key in ("tau", "lossless", "per_position_acceptance", "n_prompts"):
        assert key in on_disk
    assert (run / "acceptance.png").stat().st_size > 1000

    # `trainer eval --dtype bfloat16`: the target is loaded in bf16 (on a GPU by default), the float32
    # drafter decodes against it (the stand-in loader is replaced: the tiny target has no name to load)
    loaded: list[tuple[str, torch.dtype, str]] = []

    def load_bf16(spec: str, *, dtype: torch.dtype, device: str) -> Any:
        loaded.append((spec, dtype, device))
        return dataclasses.replace(target, model=copy.deepcopy(target.model).to(dtype))

    monkeypatch.setattr(evaluate_mod, "load_target", load_bf16)
    half = evaluate(run, progress=False, dtype="bfloat16", out_dir=tmp_path / "bf16")
    assert loaded == [("tiny", torch.bfloat16, "cpu")]
    assert half["n_prompts"] == 2
    assert 1.0 <= half["tau"] <= 4
    assert half["acceptance_length"] == pytest.approx(1 + sum(half["per_position_acceptance"]), abs=1e-3)

    out = export(run, run / "export")
    config = json.loads((out / "config.json").read_text())
    for key in REQUIRED_KEYS:
        assert key in config
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["model_type"] == "qwen3"
    assert config["dflash_config"]["mask_token_id"] == MASK
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names}
        assert all(f.get_slice(k).get_dtype() == "BF16" for k in names)
    from trainer.dflash.config import config_from_dict

    assert shapes == expected_shapes(
        config_from_dict(config), len(config["dflash_config"]["target_layer_ids"])
    )
    assert json.loads((out / "dflash_factory.json").read_text())["eval"]["lossless"] is True
    # the round trip: the export loads back as the trained drafter (up to bf16 rounding)
    from trainer.dflash.model import DFlashDraftModel

    trained, back = DFlashDraftModel.load(run / "drafter"), DFlashDraftModel.load(out)
    assert back.target_layer_ids == trained.target_layer_ids
    assert back.block_size == trained.block_size
    for name, w in trained.state_dict().items():
        assert torch.allclose(back.state_dict()[name], w.to(torch.bfloat16).float()), name


def test_sigterm_checkpoints_and_the_run_resumes(  # type: ignore[no-untyped-def]
    tmp_path: Path, calls: Path, target, monkeypatch
) -> None:
    c = cfg(tmp_path, calls, epochs=4, name="sig")
    write = train_mod.append_jsonl

    # SIGTERM arrives as the second optimizer step's metrics line is written (no thread, no poll: the
    # same step every time)
    def then_signal(path: Path, rec: dict[str, Any]) -> None:
        write(path, rec)
        if path.name == "metrics.jsonl" and rec["step"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(train_mod, "append_jsonl", then_signal)
    with pytest.raises(SystemExit) as exc:
        train(c, target=target)
    assert exc.value.code == 128 + signal.SIGTERM
    monkeypatch.setattr(train_mod, "append_jsonl", write)
    ckpt = latest_checkpoint(tmp_path / "runs" / "sig")
    assert ckpt is not None
    # the ranks agree on a signal at the next optimizer step: step 3 is taken, checkpointed, and the run stops
    assert json.loads((ckpt / "trainer_state.json").read_text())["step"] == 3
    assert not (tmp_path / "runs" / "sig" / "drafter").exists()

    run = train(c, target=target)  # the same command again resumes
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, steps[-1] + 1))  # continued where it stopped: no step repeated or skipped
    assert json.loads((run / "train_summary.json").read_text())["steps"] == steps[-1]
    assert (run / "drafter" / "model.safetensors").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_training_reduces_the_loss(tmp_path: Path, calls: Path, target) -> None:  # type: ignore[no-untyped-def]
    """Against the same run with a learning rate too small to move the weights: the same batches, so the
    difference at the end is what training did, not which steps came last."""

    def losses(name: str, lr: float) -> list[float]:
        run = train(cfg(tmp_path, calls, epochs=6, name=name, lr=lr), target=target)
        return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]

    trained, still = losses("loss", 1e-2), losses("still", 1e-12)
    assert torch.isfinite(torch.tensor(trained)).all()
    assert sum(trained[-3:]) < 0.8 * sum(still[-3:])
    assert sum(trained[-3:]) < 0.8 * sum(trained[:3])


def test_packed_training_takes_fewer_steps_over_the_same_tokens(tmp_path: Path, calls: Path, target) -> None:  # type: ignore[no-untyped-def]
    one = train(cfg(tmp_path, calls, name="one", epochs=1), target=target)
    packed = train(cfg(tmp_path, calls, name="packed", epochs=1, packing=True), target=target)
    s_one = json.loads((one / "train_summary.json").read_text())
    s_packed = json.loads((packed / "train_summary.json").read_text())
    assert s_packed["steps"] < s_one["steps"]  # several sequences per step within max_len=256
    assert s_packed["target_tokens"] == s_one["target_tokens"]  # the same tokens, each computed once
    assert s_packed["supervised_tokens"] == s_one["supervised_tokens"]
    sharing = json.loads((packed / "data" / "report.json").read_text())["sharing"]
    assert (
        sharing["target_tokens_shared"] <= sharing["target_tokens_merged"] < sharing["target_tokens_per_call"]
    )
    assert (packed / "drafter" / "model.safetensors").exists()


def test_a_sequence_longer_than_max_len_trains_on_its_whole_context(
    tmp_path: Path, calls: Path, target
) -> None:  # type: ignore[no-untyped-def]
    """`max_len` is a packing budget, not a cut: a longer sequence is a step of its own whose features come
    from a forward over all of it (never a shortened prompt); `step_anchors` bounds its blocks
    (tests/trainer/dflash/test_flex_mask.py)."""
    roomy = train(cfg(tmp_path, calls, name="roomy", epochs=1, packing=True), target=target)
    tight = train(
        cfg(tmp_path, calls, name="tight", epochs=1, packing=True, max_len=24, step_anchors=5), target=target
    )
    s_roomy = json.loads((roomy / "train_summary.json").read_text())
    s_tight = json.loads((tight / "train_summary.json").read_text())
    seqs = json.loads((tight / "data" / "report.json").read_text())
    longest = max(len(r["input_ids"]) for r in _rows(tight / "data" / "train.parquet"))
    assert longest > 24  # the sample really has sequences past the budget
    assert s_tight["target_tokens"] == s_roomy["target_tokens"]  # every token of every context computed
    assert s_tight["steps"] > s_roomy["steps"]
    assert not seqs.get("dropped")  # nothing cut away or dropped for its length
    assert (tight / "drafter" / "model.safetensors").exists()


def test_held_out_evaluation_every_n_steps_and_tensorboard(tmp_path: Path, calls: Path, target) -> None:  # type: ignore[no-untyped-def]
    run = train(
        cfg(tmp_path, calls, name="tb", max_steps=4, eval_every=2, trackers=["tensorboard"]), target=target
    )
    lines = [json.loads(line) for line in (run / "heldout.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [2, 4]
    assert all(len(r["accept"]) == 3 and r["blocks"] > 0 and r["loss"] > 0 for r in lines)
    assert all(r["context"] in ("reads its context", "not resolved", "IGNORES ITS CONTEXT") for r in lines)
    assert all(1 <= r["tau_scrambled"] <= 4 for r in lines)  # block 4: at most 3 drafts and the bonus
    assert all(r["prompts"]["blocks"] > r["blocks"] for r in lines)  # the dense view: every position
    assert (run / "heldout.png").stat().st_size > 0  # the curve, redrawn at each point
    assert json.loads((run / "train_summary.json").read_text())["heldout"] == lines[-1]
    events = list(run.rglob("events.out.tfevents.*"))
    assert events  # accelerate's TensorBoard tracker wrote under the run directory
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = EventAccumulator(str(events[0].parent)).Reload().Tags()["scalars"]
    assert {"train/loss", "heldout/loss", "heldout/tau", "heldout/accept@1"} <= set(tags)


def test_ranks_agree_on_a_signal_one_step_later_without_waiting_for_this_step() -> None:
    """With several ranks, `agreed()` reads the reduction started at the previous optimizer step: every
    rank reads the same value at the same step. (A stand-in Accelerator: two ranks' max is this one's.)"""
    from trainer.checkpoint import StopSignal

    class TwoRanks:
        num_processes = 2
        device = torch.device("cpu")

        def reduce(self, t: torch.Tensor, how: str) -> torch.Tensor:
            assert how == "max"
            return t.clone()

    stop = StopSignal(TwoRanks())  # type: ignore[arg-type]
    assert stop.agreed() == 0
    stop.signum = signal.SIGTERM  # received during the next step
    assert stop.agreed() == 0  # this step's reduction is started, the previous one (0) is read
    assert stop.agreed() == signal.SIGTERM  # one step later every rank sees it


def test_a_time_budget_ends_training_at_a_step_and_keeps_the_drafter(
    tmp_path: Path, calls: Path, target
) -> None:  # type: ignore[no-untyped-def]
    """`max_minutes` (the CPU config's budget): a budget spent by the first step ends the loop after it,
    and the run finishes as any other — the drafter saved, the summary saying it was cut short."""
    run = train(cfg(tmp_path, calls, name="budget", epochs=50, max_minutes=1e-6), target=target)
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["steps"] == 1
    assert summary["planned_steps"] > 50
    assert summary["stopped_by_budget"] is True
    assert summary["max_minutes"] == 1e-6
    assert (run / "drafter" / "config.json").is_file()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1


class HeadElsewhere(torch.nn.Module):
    """The LM head of a target sharded over GPUs, as the drafter's device sees it: its weight is not to be
    read per step. The target's own forward still runs it where it lives (its greedy labels)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("where_it_lives", weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.where_it_lives.T

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        raise AssertionError("the target's LM head was read after setup, from the device it lives on")


@pytest.mark.parametrize("drafter", ["dflash", "dflash2", "dspark"])
def test_the_loop_uses_the_targets_head_where_the_drafter_is(  # type: ignore[no-untyped-def]
    tmp_path: Path, calls: Path, monkeypatch, drafter: str
) -> None:
    """A target sharded over GPUs (`target_device_map`) keeps its LM head on the last one, the drafter
    trains on the first: steps and held-out evaluation use the copy made at setup, on the drafter's device."""
    target = tiny_target(layers=4)  # its own: this one loses its head
    setup = train_mod.make_drafting

    def then_shard(*args):  # type: ignore[no-untyped-def]
        d = setup(*args)
        assert d.head.device == d.embed.device == torch.device("cpu")
        target.model.set_output_embeddings(HeadElsewhere(d.head))
        return d

    monkeypatch.setattr(train_mod, "make_drafting", then_shard)
    run = train(cfg(tmp_path, calls, name=drafter, drafter=drafter, max_steps=2, eval_every=1), target=target)
    assert json.loads((run / "train_summary.json").read_text())["steps"] == 2
    assert len((run / "heldout.jsonl").read_text().splitlines()) == 2


def test_ranks_wait_as_long_as_configured_and_cuda_segments_expand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 builds the data while the others wait at a barrier: NCCL's 10-minute default would end a
    large run's start. And a step's sizes vary all run long, which fixed CUDA segments fragment."""
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.setenv(name, "")  # recorded, so the test's own setting is undone after it
        monkeypatch.delenv(name)
    acc = accelerator(TrainConfig(target="tiny", dist_timeout_minutes=90))
    assert acc.init_handler is not None
    assert acc.init_handler.timeout == timedelta(minutes=90)
    assert acc.ddp_handler is not None
    assert acc.ddp_handler.gradient_as_bucket_view  # no second copy of the gradients
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")  # a user's own is kept
    accelerator(TrainConfig(target="tiny"))
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "backend:cudaMallocAsync"
