"""Prometheus metrics of the stand-in server, under vLLM's names where vLLM has one."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from lm.engine import DecodingStrategy
from lm.standin.scheduler import Scheduler

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)


class _Live(Collector):
    """Values read at scrape time: the queue, and the strategy's speculative-decoding counters."""

    def __init__(self, model_name: str, scheduler: Scheduler, strategy: DecodingStrategy) -> None:
        self.model_name, self.scheduler, self.strategy = model_name, scheduler, strategy

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels, values = ["model_name"], [self.model_name]
        running = GaugeMetricFamily(
            "vllm:num_requests_running",
            "Requests being generated. The CPU stand-in runs ONE model forward at a time: running requests "
            "are interleaved forward by forward (round robin), never batched.",
            labels=labels,
        )
        running.add_metric(values, self.scheduler.num_running)
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting",
            "Requests queued (first come, first served) behind the running ones.",
            labels=labels,
        )
        waiting.add_metric(values, self.scheduler.num_waiting)
        slots = GaugeMetricFamily(
            "dflash_target_max_concurrent_forwards",
            "Model forwards that can run at once on this server (always 1: requests are served one "
            "forward at a time).",
            labels=labels,
        )
        slots.add_metric(values, 1)
        max_running = GaugeMetricFamily(
            "dflash_target_max_running_requests",
            "Requests interleaved at most; the rest wait (--max-num-seqs).",
            labels=labels,
        )
        max_running.add_metric(values, self.scheduler.max_running)
        yield from (running, waiting, slots, max_running)

        stats = self.strategy.spec_stats
        if stats is None:
            return
        # vLLM's names, help and labels exactly (vllm/v1/spec_decode/metrics.py): `engine` is the engine
        # core's index, always "0" here; the family names get `_total` when rendered.
        spec_labels, spec_values = [*labels, "engine"], [*values, "0"]
        for name, value, doc in (
            ("vllm:spec_decode_num_drafts", stats.num_drafts, "Number of spec decoding drafts."),
            ("vllm:spec_decode_num_draft_tokens", stats.num_draft_tokens, "Number of draft tokens."),
            ("vllm:spec_decode_num_accepted_tokens", stats.num_accepted_tokens, "Number of accepted tokens."),
        ):
            family = CounterMetricFamily(name, doc, labels=spec_labels)
            family.add_metric(spec_values, value)
            yield family
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=[*spec_labels, "position"],
        )
        # vLLM lists every position (num_speculative_tokens of them) from the start, zeros included.
        block = getattr(self.strategy, "block_size", 0)
        counts = list(stats.accepted_per_pos)
        counts += [0] * max(0, int(block) - 1 - len(counts))
        for pos, value in enumerate(counts):
            per_pos.add_metric([*spec_values, str(pos)], value)
        yield per_pos


class ServerMetrics:
    def __init__(self, model_name: str, scheduler: Scheduler, strategy: DecodingStrategy) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self.registry.register(_Live(model_name, scheduler, strategy))
        r, labels = self.registry, ["model_name"]
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated.", labels, registry=r)
        self.request_success = Counter(
            "vllm:request_success",
            "Finished requests by finish reason.",
            [*labels, "finished_reason"],
            registry=r,
        )
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds",
            "Time from arrival to the first forward.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time from arrival to the first generated token.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Time from arrival to the last token.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

    def finished(
        self, *, prompt_tokens: int, generation_tokens: int, reason: str, ttft: float, e2e: float
    ) -> None:
        name = self.model_name
        self.prompt_tokens.labels(name).inc(prompt_tokens)
        self.generation_tokens.labels(name).inc(generation_tokens)
        self.request_success.labels(name, reason).inc()
        self.ttft.labels(name).observe(ttft)
        self.e2e.labels(name).observe(e2e)

    def render(self) -> bytes:
        return generate_latest(self.registry)
