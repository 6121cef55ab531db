"""/metrics names and labels are vLLM's, so `trainer replay` reads the stand-in like a vLLM server."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from lm.engine import SpecDecodeStats
from lm.standin.metrics import ServerMetrics

SPEC = {
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
}


def _samples(metrics: ServerMetrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _metrics(strategy: object) -> ServerMetrics:
    scheduler = SimpleNamespace(num_running=0, num_waiting=0, max_running=4)  # read at scrape time only
    return ServerMetrics("m", scheduler, strategy)  # type: ignore[arg-type]


def test_spec_decode_counters_have_vllms_names_and_labels() -> None:
    strategy = SimpleNamespace(name="dflash", block_size=4, spec_stats=SpecDecodeStats())
    fresh = _samples(_metrics(strategy))
    # every draft position is listed from the start, zeros included, as vLLM does
    assert fresh["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == [
        ({"model_name": "m", "engine": "0", "position": str(k)}, 0.0) for k in range(3)
    ]
    strategy.spec_stats.record(3, 2)
    strategy.spec_stats.record(3, 0)
    got = _samples(_metrics(strategy))
    assert got["vllm:spec_decode_num_drafts_total"] == [({"model_name": "m", "engine": "0"}, 2.0)]
    assert got["vllm:spec_decode_num_draft_tokens_total"] == [({"model_name": "m", "engine": "0"}, 6.0)]
    assert got["vllm:spec_decode_num_accepted_tokens_total"] == [({"model_name": "m", "engine": "0"}, 2.0)]
    per_pos = [v for _labels, v in got["vllm:spec_decode_num_accepted_tokens_per_pos_total"]]
    assert per_pos == [1.0, 1.0, 0.0]


def test_plain_decoding_exposes_no_spec_decode_counters() -> None:
    names = set(_samples(_metrics(SimpleNamespace(name="autoregressive", spec_stats=None))))
    assert not {n.removesuffix("_total") for n in names} & SPEC
    assert "vllm:num_requests_running" in names
