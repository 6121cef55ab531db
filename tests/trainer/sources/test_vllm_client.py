"""The vllm source's retries, echo check and all-or-nothing batches.

The transport is faked (httpx.MockTransport) because the failures under test — a GPU vLLM answering 503
while it warms up, a proxy retokenizing the prompt — cannot be provoked from the stand-in; the files are
still written by the stand-in's real extractor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from lm import Target
from lm.standin.extract import ExtractionSettings, Extractor
from trainer.sources.base import FeatureError
from trainer.sources.numbering import to_vllm
from trainer.sources.vllm import VllmSource, VllmSourceSettings

TAPS = [0, 2]


def source(tiny: Target, handler: Any, tmp_path: Path, **kw: Any) -> VllmSource:
    settings = VllmSourceSettings.model_validate(
        {"model": "tiny-qwen3", "launched_aux_layer_ids": to_vllm(TAPS, 4), "backoff_s": 0.01, **kw}
    )
    src = VllmSource(settings, tiny.num_layers, tiny.hidden_size)
    src.http = httpx.Client(base_url="http://vllm", transport=httpx.MockTransport(handler))
    return src


def extractor(tiny: Target, tmp_path: Path) -> Extractor:
    return Extractor(tiny, ExtractionSettings(aux_layer_ids=to_vllm(TAPS, 4), shared_storage_path=tmp_path))


def test_transient_failures_are_retried_with_backoff(tiny: Target, tmp_path: Path) -> None:
    ex, calls = extractor(tiny, tmp_path), []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            return httpx.Response(503, json={"error": {"message": "warming up"}})
        return httpx.Response(200, json=ex.complete(json.loads(request.content)))

    feats = source(tiny, handler, tmp_path).taps_many([[1, 2, 3]], TAPS)
    assert len(calls) == 3
    assert feats[0].shape == (3, 2 * tiny.hidden_size)


def test_retries_give_up_with_a_clear_error(tiny: Target, tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503)

    with pytest.raises(FeatureError, match="failed after 2 tries"):
        source(tiny, handler, tmp_path, attempts=2).taps_many([[1, 2, 3]], TAPS)


def test_a_reply_echoing_other_prompt_ids_is_refused(tiny: Target, tmp_path: Path) -> None:
    ex = extractor(tiny, tmp_path)

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        reply = ex.complete({**body, "prompt": [*body["prompt"][:-1], 7]})  # a retokenized prompt
        return httpx.Response(200, json=reply)

    with pytest.raises(FeatureError, match="echoed other prompt ids"):
        source(tiny, handler, tmp_path).taps_many([[1, 2, 3]], TAPS)


def test_one_failed_sequence_fails_the_batch(tiny: Target, tmp_path: Path) -> None:
    ex = extractor(tiny, tmp_path)

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body["prompt"][0] == 9:
            return httpx.Response(400, json={"error": {"message": "prompt too long"}})  # not retried
        return httpx.Response(200, json=ex.complete(body))

    with pytest.raises(FeatureError, match="400"):
        source(tiny, handler, tmp_path).taps_many([[1, 2], [9, 9], [3, 4]], TAPS)


def test_a_file_of_the_wrong_dtype_or_shape_is_refused(tiny: Target, tmp_path: Path) -> None:
    ex = extractor(tiny, tmp_path)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=ex.complete(json.loads(request.content)))

    with pytest.raises(FeatureError, match=r"dtype torch\.float32, expected bfloat16"):
        source(tiny, handler, tmp_path, dtype="bfloat16").taps_many([[1, 2, 3]], TAPS)
    narrow = Extractor(tiny, ExtractionSettings(aux_layer_ids=[1, 4], shared_storage_path=tmp_path))

    def two_slots(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=narrow.complete(json.loads(request.content)))

    with pytest.raises(FeatureError, match=r"expected \[T, aux ids, H\]"):
        source(tiny, two_slots, tmp_path).taps_many([[1, 2, 3]], TAPS)
