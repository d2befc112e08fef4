"""Prometheus metrics, one prefix (``embedtext_``) and a unit suffix on each.

Metrics live in a registry of their own (not the process-global one) so that several
servers in one process, as in tests, do not collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_TIME_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ChildrenOnce:
    """A labelled metric whose children are each made once: prometheus_client's ``labels()``
    checks and locks on every call, and the event loop calls it about 20 times a request."""

    def __init__(self, metric) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], object] = {}

    def labels(self, *values: str):
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child

    def __getattr__(self, name: str):
        return getattr(self.metric, name)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("embedtext_requests", "Embed requests answered", ["model", "code"], registry=r)
        self.rows = Counter("embedtext_rows", "Rows embedded", ["model"], registry=r)
        self.tokens = Counter("embedtext_tokens", "Tokens embedded", ["model"], registry=r)
        self.failures = Counter("embedtext_failures", "Failed requests by cause", ["model", "cause"], registry=r)
        self.unauthenticated = Counter(
            "embedtext_unauthenticated", "Calls refused for a missing or wrong token", registry=r
        )
        self.batch_rows = Histogram(
            "embedtext_batch_rows", "Rows per engine batch", ["model"], buckets=_ROW_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            "embedtext_batch_tokens",
            "Tokens per engine batch",
            ["model"],
            buckets=tuple(b * 64 for b in _ROW_BUCKETS),
            registry=r,
        )
        self.queue_time = Histogram(
            "embedtext_queue_duration_seconds",
            "Time rows wait before their batch runs",
            ["model"],
            buckets=_TIME_BUCKETS,
            registry=r,
        )
        self.inference_time = Histogram(
            "embedtext_inference_duration_seconds",
            "Engine time per batch",
            ["model"],
            buckets=_TIME_BUCKETS,
            registry=r,
        )
        self.request_time = Histogram(
            "embedtext_request_duration_seconds",
            "Server time per Embed request",
            ["model"],
            buckets=_TIME_BUCKETS,
            registry=r,
        )
        self.queued_rows = Gauge("embedtext_queued_rows", "Rows waiting for a batch", ["model"], registry=r)
        self.replica_inflight_tokens = Gauge(
            "embedtext_replica_inflight_tokens", "Tokens in flight per replica", ["model", "replica"], registry=r
        )
        self.replica_inflight_batches = Gauge(
            "embedtext_replica_inflight_batches", "Batches in flight per replica", ["model", "replica"], registry=r
        )
        self.replica_batches = Counter(
            "embedtext_replica_batches", "Batches run per replica", ["model", "replica"], registry=r
        )
        self.replica_model_seconds = Counter(
            "embedtext_replica_model_cpu_seconds",
            "CPU seconds the replica's engine thread spent in the model's forward (the rest is its path's)",
            ["model", "replica"],
            registry=r,
        )
        self.replica_healthy = Gauge(
            "embedtext_replica_healthy", "1 when the replica is in rotation", ["model", "replica"], registry=r
        )
        self.replica_restarts = Counter(
            "embedtext_replica_restarts", "Replica restarts after a failure", ["model", "replica"], registry=r
        )
        # Per latency class (interactive, bulk): what each class of caller gets.
        self.class_rows = Counter(
            "embedtext_class_rows", "Rows embedded per latency class", ["model", "latency_class"], registry=r
        )
        self.class_queue_time = Histogram(
            "embedtext_class_queue_duration_seconds",
            "Time a request's rows wait for an engine, per latency class",
            ["model", "latency_class"],
            buckets=_TIME_BUCKETS,
            registry=r,
        )
        self.class_latency = Histogram(
            "embedtext_class_latency_seconds",
            "Queue and engine time per request, per latency class",
            ["model", "latency_class"],
            buckets=_TIME_BUCKETS,
            registry=r,
        )
        self.bulk_batch_tokens = Gauge(
            "embedtext_bulk_batch_tokens",
            "Token budget of a bulk batch (paced to --interactive-slo-ms)",
            ["model"],
            registry=r,
        )
        self.engine_step_tokens = Gauge(
            "embedtext_engine_step_tokens",
            "Token budget of a stepped engine's step, per replica (paced where it runs queries; 0: not stepped)",
            ["model", "replica"],
            registry=r,
        )
        self.interactive_slo_missed = Gauge(
            "embedtext_interactive_slo_missed",
            "1 while the engines are too slow to hold --interactive-slo-ms even at the smallest batch or step",
            ["model"],
            registry=r,
        )
        self.engine_tokens_per_s = Gauge(
            "embedtext_engine_tokens_per_second",
            "Tokens per second one engine computes while busy (bulk batches)",
            ["model"],
            registry=r,
        )
        self.queued_class_rows = Gauge(
            "embedtext_queued_class_rows", "Rows waiting per latency class", ["model", "latency_class"], registry=r
        )
        self.bulk_rows_held = Gauge(
            "embedtext_bulk_rows_held",
            "Bulk rows held before the tokenizer until the queue drains (with an interactive target)",
            ["model"],
            registry=r,
        )
        self.refusals = Counter(
            "embedtext_refusals", "Requests refused before they were queued, by reason", ["model", "reason"], registry=r
        )
        self.retries = Counter("embedtext_batch_retries", "Batches retried on another replica", ["model"], registry=r)
        self.event_loop_lag = Histogram(
            "embedtext_event_loop_lag_seconds",
            "How late the server's event loop ran a timer (gRPC, the queue and the hand-overs all wait as long)",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5),
            registry=r,
        )
        for name, metric in list(vars(self).items()):
            if getattr(metric, "_labelnames", ()):  # (prometheus_client's own record of its labels)
                setattr(self, name, ChildrenOnce(metric))

    def serve_http(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
