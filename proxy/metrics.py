"""Prometheus metrics, one registry per app (no process-global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.sink import CallSink
from proxy.uploader import Uploader


class ProxyMetrics:
    def __init__(self, sink: CallSink, uploader: Uploader | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "dflash_proxy_requests", "Requests by route and status", ["route", "status"], registry=r
        )
        self.in_flight = Gauge("dflash_proxy_in_flight", "Requests being relayed", registry=r)
        self.request_bytes = Counter("dflash_proxy_request_bytes", "Request body bytes received", registry=r)
        self.response_bytes = Counter("dflash_proxy_response_bytes", "Response bytes relayed", registry=r)
        self.ttfb = Histogram(
            "dflash_proxy_time_to_first_byte_seconds",
            "Time from request to the upstream's first response byte",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.refused = Counter(
            "dflash_proxy_refused", "Requests answered 503 before any work, by reason", ["reason"], registry=r
        )
        self.record_failures = Counter(
            "dflash_proxy_record_failures", "Calls whose record could not be made durable", registry=r
        )
        Gauge("dflash_proxy_records_written", "Call records made durable", registry=r).set_function(
            lambda: sink.written
        )
        Gauge(
            "dflash_proxy_spool_depth", "Durable records not yet rolled into Parquet", registry=r
        ).set_function(lambda: sink.depth)
        Gauge("dflash_proxy_recording", "1 while calls can be recorded, else 0", registry=r).set_function(
            lambda: 1 if sink.health.ok else 0
        )
        Gauge(
            "dflash_proxy_roll_failures", "Failed attempts to roll a spool segment", registry=r
        ).set_function(lambda: getattr(sink, "roll_failures", 0))
        Gauge(
            "dflash_proxy_roll_pending", "Closed spool segments waiting to be rolled", registry=r
        ).set_function(lambda: getattr(sink, "roll_pending", 0))

        if uploader is not None:
            self._upload_gauges(uploader)

    def _upload_gauges(self, up: Uploader) -> None:
        r = self.registry
        Gauge(
            "dflash_proxy_upload_parts", "Parts the store confirmed (then removed locally)", registry=r
        ).set_function(lambda: up.stats.uploaded)
        Gauge("dflash_proxy_upload_bytes", "Bytes the store confirmed", registry=r).set_function(
            lambda: up.stats.bytes
        )
        Gauge(
            "dflash_proxy_upload_failures", "Failed upload attempts (each retried)", registry=r
        ).set_function(lambda: up.stats.failures)
        Gauge(
            "dflash_proxy_upload_pending", "Rolled parts waiting locally for the store", registry=r
        ).set_function(lambda: len(up.pending()))

    def render(self) -> bytes:
        return generate_latest(self.registry)
