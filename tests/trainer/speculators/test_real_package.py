"""Our speculators adapters against speculators itself (0.9.0, in `.venv-speculators`, which `make
speculators` installs and `make test` ensures), both ways: speculators loads the checkpoint
`to_speculators` writes as its own DFlashDraftModel with every tensor equal, and reads the data folder
`export-speculators` writes with our split; a checkpoint speculators saves imports through
`from_speculators` to our drafter's tensors and decodes losslessly in our engine. The verifier is a tiny
Qwen3 saved as a local folder: speculators reads the embedding and head from it, as from the Hub."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from lm.engine import Engine, SamplingParams
from tests.trainer.dflash.tiny import greedy, save_tiny, tiny_target
from tests.trainer.speculators.test_speculators import drafter_dir
from trainer.dflash.engine import DFlashSpeculative
from trainer.dflash.model import DFlashDraftModel
from trainer.speculators import env
from trainer.speculators.checkpoint import from_speculators, to_speculators
from trainer.speculators.data import export

pytestmark = pytest.mark.slow  # a fresh interpreter importing speculators and torch

IN_SPECULATORS = textwrap.dedent(
    """
    import json, sys, torch
    from safetensors.torch import load_file
    from speculators import SpeculatorModel
    from speculators.train.data import ArrowDataset

    spec, saved, data, ratio = sys.argv[1:5]
    model = SpeculatorModel.from_pretrained(spec)
    ours, theirs = load_file(spec + "/model.safetensors"), model.state_dict()
    out = {
        "class": type(model).__module__ + "." + type(model).__name__,
        "only_ours": sorted(set(ours) - set(theirs)),
        "only_theirs": sorted(set(theirs) - set(ours)),
        "differ": sorted(k for k in set(ours) & set(theirs) if not torch.equal(ours[k], theirs[k].to(ours[k].dtype))),
    }
    head = theirs.get("verifier_lm_head.weight")
    out["verifier_head_is_ours"] = head is not None and torch.equal(head.to(ours["lm_head.weight"].dtype), ours["lm_head.weight"])
    model.save_pretrained(saved)
    for split in ("train", "val"):
        ds = ArrowDataset(max_len=64, datapath=data, train_ratio=float(ratio), split=split, on_missing="skip")
        out[split] = [list(map(int, ids)) for ids in ds.data["input_ids"]]
    print(json.dumps(out))
    """
)


def run_data(tmp: Path) -> Path:
    """A run's built data (train then eval rows), as `trainer train` writes it."""
    data = tmp / "run" / "data"
    data.mkdir(parents=True)
    rows = {"train": [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]], "eval": [[9, 9, 8, 8, 7]]}
    for split, seqs in rows.items():
        masks = [[0] + [1] * (len(s) - 1) for s in seqs]
        table = pa.table({"input_ids": seqs, "loss_mask": masks, "split": [split] * len(seqs)})
        pq.write_table(table, data / f"{split}.parquet")
    return tmp / "run"


def test_speculators_itself_reads_our_formats_and_we_read_its_checkpoint(tmp_path: Path) -> None:
    if not env.installed():
        pytest.fail(f"speculators' environment is missing ({env.venv_dir()}): run `make speculators`")
    target = tiny_target(layers=6)
    verifier = save_tiny(tmp_path / "verifier", target)
    ours = drafter_dir(tmp_path)
    shared = {
        "embed_tokens.weight": target.embed_tokens.weight.detach().to(torch.bfloat16),
        "lm_head.weight": target.lm_head.weight.detach().to(torch.bfloat16),
    }
    spec = to_speculators(ours, tmp_path / "spec", verifier=str(verifier), shared=shared)
    meta = export(run_data(tmp_path), tmp_path / "spec-data")
    result = subprocess.run(
        [
            env.python(),
            "-c",
            IN_SPECULATORS,
            str(spec),
            str(tmp_path / "saved"),
            str(tmp_path / "spec-data"),
            str(meta["train_data_ratio"]),
        ],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["class"] == "speculators.models.dflash.core.DFlashDraftModel"
    assert seen["only_ours"] == seen["differ"] == []
    # what it reads from the verifier itself (the final norm, and the head it scores drafts with)
    assert seen["only_theirs"] == ["verifier_lm_head.weight", "verifier_norm.weight"]
    assert seen["verifier_head_is_ours"]
    assert seen["train"] == [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]]  # our split, by its ratio
    assert seen["val"] == [[9, 9, 8, 8, 7]]
    # speculators' own save, imported: our drafter's tensors, decoding losslessly in our engine
    back = from_speculators(tmp_path / "saved", tmp_path / "back", num_target_layers=6)
    a, b = load_file(str(ours / "model.safetensors")), load_file(str(back / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k].to(a[k].dtype)) for k in a)
    drafter = DFlashDraftModel.load(back)
    prompt, params = [5, 17, 200, 9, 123], SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    decoded = [
        t for s in Engine(target, DFlashSpeculative(drafter)).steps(prompt, params) for t in s.token_ids
    ]
    assert decoded == greedy(target, prompt, 24)
