"""The gauges a model's runtime reports: read from its queue, engines and tokenizing gate as they are scraped."""

from __future__ import annotations

from typing import Any

from embedtext.server.metrics import ServerMetrics
from embedtext.server.scheduler.replicas import reported_pace


def watch_runtime(runtime: Any, metrics: ServerMetrics) -> None:
    """Register ``runtime``'s gauges (a ``ModelRuntime``: server/scheduler/runtime.py) under its model's name."""
    name = runtime.spec.name
    queue = runtime.queue
    metrics.bulk_batch_tokens.labels(name).set_function(lambda: queue.bulk_batch_tokens)
    metrics.engine_tokens_per_s.labels(name).set_function(lambda: runtime.engine_tokens_per_s)
    for replica in runtime.supervisor.replicas:
        metrics.engine_step_tokens.labels(name, str(replica.index)).set_function(
            lambda r=replica: pace.budget_tokens if (pace := reported_pace(r)) else 0
        )
    metrics.interactive_slo_missed.labels(name).set_function(lambda: float(runtime.interactive_slo_missed))
    metrics.queued_rows.labels(name).set_function(lambda: queue.queued_rows)
    metrics.queued_class_rows.labels(name, "interactive").set_function(lambda: queue.queued_interactive_rows)
    metrics.queued_class_rows.labels(name, "bulk").set_function(lambda: queue.queued_bulk_rows)
    if runtime.tokenizing_gate is not None:
        gate = runtime.tokenizing_gate
        metrics.bulk_rows_held.labels(name).set_function(lambda: gate.waiting_rows)
