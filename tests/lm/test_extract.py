"""The stand-in's vLLM-style hidden-state extraction (lm/standin/extract.py), against the CPU model."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import torch
from safetensors.torch import load_file

from lm import Target
from lm.standin.extract import ExtractionSettings, Extractor, create_app

from .conftest import live


@pytest.fixture
def settings(tmp_path: Path) -> ExtractionSettings:
    return ExtractionSettings(aux_layer_ids=[1, 3, 4], shared_storage_path=tmp_path)


def test_aux_id_i_is_the_input_of_layer_i_and_num_layers_the_last_output(
    tiny: Target, settings: ExtractionSettings
) -> None:
    # vLLM's definition, checked against Hugging Face's hidden_states (index i = input of layer i;
    # its last entry is after the final norm, so the last layer's raw output comes from Target.tap).
    ids = [5, 17, 400, 9, 1234, 77]
    states, token = Extractor(tiny, settings).hidden_states(ids)
    with torch.no_grad():
        out = tiny.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    hs = out.hidden_states
    assert states.shape == (6, 3, tiny.hidden_size)
    assert torch.equal(states[:, 0], hs[1][0])
    assert torch.equal(states[:, 1], hs[3][0])
    last = tiny.tap(torch.tensor([ids]), [tiny.num_layers - 1])[0]
    assert torch.equal(states[:, 2], last)
    assert not torch.equal(states[:, 2], hs[4][0])  # not the post-norm state
    assert token == int(out.logits[0, -1].argmax())


def test_a_completion_request_writes_the_file_vllm_writes(tiny: Target, settings: ExtractionSettings) -> None:
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    with live_extract(tiny, settings) as url:
        body = {"model": tiny.name, "prompt": ids, "max_tokens": 1, "return_token_ids": True}
        reply = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()
    assert reply["choices"][0]["prompt_token_ids"] == ids
    assert len(reply["choices"][0]["token_ids"]) == 1
    path = Path(reply["kv_transfer_params"]["hidden_states_path"])
    assert path.parent == settings.shared_storage_path
    assert path.suffix == ".safetensors"
    with Path(str(path) + ".lock").open() as lock:  # released: a shared lock is granted at once
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    data = load_file(str(path))
    assert data["token_ids"].tolist() == ids
    assert data["hidden_states"].shape == (len(ids), 3, tiny.hidden_size)
    assert data["hidden_states"].dtype == torch.float32


def test_bad_extraction_requests_are_400_with_a_reason(tiny: Target, settings: ExtractionSettings) -> None:
    with live_extract(tiny, settings) as url:
        text = httpx.post(f"{url}/v1/completions", json={"prompt": "hello", "max_tokens": 1}, timeout=60)
        many = httpx.post(f"{url}/v1/completions", json={"prompt": [1, 2], "max_tokens": 5}, timeout=60)
        other = httpx.post(f"{url}/v1/completions", json={"prompt": [10**9], "max_tokens": 1}, timeout=60)
        models = httpx.get(f"{url}/v1/models", timeout=60)  # the rest of the server is still there
    assert text.status_code == 400
    assert text.json()["error"]["param"] == "prompt"
    assert many.status_code == 400
    assert many.json()["error"]["param"] == "max_tokens"
    assert other.status_code == 400
    assert "token ids" in other.json()["error"]["message"]
    assert models.json()["data"][0]["id"] == tiny.name


def test_out_of_range_aux_ids_are_refused(tiny: Target, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"0\.\.4"):
        Extractor(tiny, ExtractionSettings(aux_layer_ids=[5], shared_storage_path=tmp_path))


@contextlib.contextmanager
def live_extract(tiny: Target, settings: ExtractionSettings) -> Iterator[str]:
    """The stand-in server in extraction mode on 127.0.0.1, for the block; yields its base URL."""
    app = create_app(tiny, settings, max_model_len=512)
    with live(SimpleNamespace(app=app)) as server:  # type: ignore[arg-type]
        yield server.url
