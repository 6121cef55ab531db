"""Prometheus metrics, one registry per app (no process-global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.sink import CallSink


class ProxyMetrics:
    def __init__(self, sink: CallSink) -> None:
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
        Gauge("dflash_proxy_records_written", "Call records made durable", registry=r).set_function(
            lambda: sink.written
        )
        Gauge(
            "dflash_proxy_spool_depth", "Durable records not yet rolled into Parquet", registry=r
        ).set_function(lambda: sink.depth)

    def render(self) -> bytes:
        return generate_latest(self.registry)
