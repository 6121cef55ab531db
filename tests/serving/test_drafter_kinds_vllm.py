"""Each drafter kind's export, loaded by vLLM 0.32's own model class and weight loader: every tensor
consumed, no parameter left unloaded (vLLM does not check that itself), embeddings and LM head shared from
the target. DFlash is also decoded by vLLM CPU (tests/serving/test_parity_vllm.py); DFlash2 and DSpark
cannot be on this CPU, and the test pins vLLM's own refusal, so a vLLM CPU that learns to serve them is
noticed (our engine decodes both losslessly: tests/trainer/dflash/test_dflash2.py, test_dspark.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from lm import Target
from serving.drafter_load import DrafterLoadError, check_loads, vllm_load
from serving.venv import python
from trainer.dflash.config import make_draft_config, resolve_mask_token
from trainer.dflash.dflash2 import DFlash2DraftModel, dflash2_config
from trainer.dflash.dspark import dspark_config
from trainer.dflash.kinds import KINDS, drafted_tokens, kind_of
from trainer.dflash.model import DFlashDraftModel

pytestmark = pytest.mark.vllm


def saved(kind: str, tiny: Target, out: Path) -> Path:
    mask, _ = resolve_mask_token(tiny.tokenizer, tiny.embed_tokens.weight.shape[0])
    cfg = make_draft_config(tiny.model.config, num_hidden_layers=2, block_size=4, mask_token_id=mask)
    torch.manual_seed(0)
    if kind == "dspark":
        cfg = dspark_config(cfg, 8)
    if kind == "dflash2":  # the SmolLM2-shaped tiny target's width is 256: four groups of 64
        cfg = dflash2_config(cfg, conv_kernel_size=2, conv_group_size=64, selector_rank=8, selector_top_k=4)
    model: DFlashDraftModel = KINDS[kind].model(cfg)
    model.save(out, dtype=torch.bfloat16)  # what `trainer export` writes
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_vllm_loads_every_tensor_of_each_kind(
    kind: str, tiny: Target, tiny_dir: Path, tmp_path: Path
) -> None:
    draft = saved(kind, tiny, tmp_path / kind)
    assert kind_of(draft) == kind
    got = vllm_load(tiny_dir, draft, KINDS[kind].method, drafted_tokens(draft))
    with safe_open(str(draft / "model.safetensors"), "pt") as f:
        assert got["consumed"] == sorted(f.keys())
    assert got["unloaded"] == []  # nothing of the drafter left as uninitialised memory
    assert {n.rsplit(".", 1)[0].split(".")[-1] for n in got["shared_from_target"]} >= {
        "embed_tokens",
        "lm_head",
    }
    assert got["method"] == KINDS[kind].method
    assert got["num_speculative_tokens"] == 3
    assert got["architecture"] == KINDS[kind].architecture
    refusal = {  # vLLM CPU 0.32's own words (its V1 model runner); a GPU vLLM serves both on V2
        "dspark": "does not support: dspark",
        "dflash2": "does not support: DFlash candidate-head drafts",
    }
    if kind in refusal:
        assert refusal[kind] in got["serve_refusal"]
    else:
        assert got["serve_refusal"] is None
    # a mask embedding vLLM would read is a drafter tensor, not a shared one; ours mask through the vocabulary
    assert not any("mask_embedding" in n for n in got["shared_from_target"])


def test_a_tensor_vllm_leaves_unloaded_fails_the_load_check(
    tiny: Target, tiny_dir: Path, tmp_path: Path
) -> None:
    """What the bench and the parity gate run before serving: a checkpoint missing a drafter tensor loads
    without an error in vLLM (the parameter keeps whatever memory held), and the check refuses it."""
    draft = saved("dflash", tiny, tmp_path / "dflash")
    weights = load_file(draft / "model.safetensors")
    dropped = next(n for n in weights if n.endswith("fc.weight"))
    save_file(
        {k: v for k, v in weights.items() if k != dropped}, draft / "model.safetensors", {"format": "pt"}
    )
    with pytest.raises(DrafterLoadError, match="unloaded"):
        check_loads(tiny_dir, draft, "dflash", drafted_tokens(draft))


# Run by vLLM's interpreter: vLLM's own DFlash2 convolution (its CPU path) and candidate scoring, on the
# tensors of an export and on inputs this test chose. Where our drafter reads a tensor in another order
# (the kernel projection's [2, taps, groups] rows, the codebooks' sides), the numbers differ.
VLLM_DFLASH2_PARTS = """
import sys
import torch
from safetensors.torch import load_file, save_file
from vllm.model_executor.models.qwen3_dflash2 import _grouped_conv, _score_edges

draft, inputs, out, block = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
w, io = load_file(draft + "/model.safetensors"), load_file(inputs)
base = w["layers.0.attention_conv.base_kernel"].float()
proj = w["layers.0.attention_conv.kernel_projection.weight"].float()
taps, hidden = base.shape[1], base.shape[2]
groups = proj.shape[0] // (2 * taps)
x = io["x"]
c = (x @ proj.T).reshape(x.shape[0], 2, taps, groups)
prepared = _grouped_conv(x, c[:, 0], base[0], block, groups, hidden // groups, taps)
finished = _grouped_conv(x, c[:, 1], base[1], block, groups, hidden // groups, taps)
sel = lambda n: w["candidate_selector." + n].float()
q = io["h"] @ sel("hidden_projection.weight").T
k = io["candidates"].shape[-1]
scores = _score_edges(sel("predecessor_codebook"), sel("successor_codebook"), io["candidates"],
                      io["unary"], q, io["anchor"], k)
save_file({"prepared": prepared, "finished": finished, "scores": scores.contiguous()}, out)
"""


def test_dflash2_convolution_and_selector_compute_what_vllms_do(tiny: Target, tmp_path: Path) -> None:
    draft = saved("dflash2", tiny, tmp_path / "d2")
    model = DFlash2DraftModel.load(draft)
    torch.manual_seed(3)
    with torch.no_grad():  # off the identity, in the precision the export holds
        for name, p in model.named_parameters():
            if "conv" in name or "candidate_selector" in name:
                p.copy_(torch.randn_like(p).mul(0.5).bfloat16().float())
    model.save(draft, dtype=torch.bfloat16)
    model = DFlash2DraftModel.load(draft)
    conv = model.layers[0].attention_conv
    block, width = 4, model.config.hidden_size
    x = torch.randn(3 * block, width)  # three requests' blocks, one after another, as vLLM lays rows
    h = torch.randn(2, block - 1, width)  # two requests' drafted slots
    head = tiny.lm_head.weight.float()
    ids, unary = model.candidates(h.flatten(0, 1), head)
    ids, unary = ids.view(2, block - 1, -1), unary.view(2, block - 1, -1)
    anchor = torch.tensor([5, 77])
    save_file({"x": x, "h": h, "candidates": ids, "unary": unary, "anchor": anchor}, str(tmp_path / "in"))
    argv = [
        str(python()),
        "-c",
        VLLM_DFLASH2_PARTS,
        str(draft),
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        str(block),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = load_file(str(tmp_path / "out"))
    with torch.no_grad():
        prepared, delta = conv.prepare(x[None])
        assert torch.allclose(prepared[0], theirs["prepared"], atol=1e-4)
        assert torch.allclose(conv.finish(x[None], delta)[0], theirs["finished"], atol=1e-4)
        for r in range(2):
            for step in range(block - 1):  # vLLM scores every (predecessor, candidate) pair of a step
                before = anchor[r].expand(ids.shape[-1]) if step == 0 else ids[r, step - 1]
                for p, prev in enumerate(before.tolist()):
                    ours = model.scores(
                        h[r, step][None], torch.tensor([prev]), ids[r, step][None], unary[r, step][None]
                    )
                    assert torch.allclose(ours[0], theirs["scores"][r, step, p], atol=1e-4), (r, step, p)
