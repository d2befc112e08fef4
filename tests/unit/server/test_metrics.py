"""The server's metrics: each labelled metric's children are made once, and export as before."""

from prometheus_client import generate_latest

from embedtext.server.metrics import ChildrenOnce, ServerMetrics


def _exported(metrics: ServerMetrics, prefix: str) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_a_labelled_metrics_children_are_made_once_and_export_their_values():
    metrics = ServerMetrics()
    made = []
    make = metrics.rows.metric.labels
    metrics.rows.metric.labels = lambda *values: made.append(values) or make(*values)
    first = metrics.rows.labels("m")
    assert metrics.rows.labels("m") is first and metrics.rows.labels("other") is not first
    assert made == [("m",), ("other",)]  # prometheus_client's labels() once a child, not a call
    first.inc(3)
    metrics.rows.labels("m").inc(2)
    metrics.replica_inflight_tokens.labels("m", "0").set(7)
    assert _exported(metrics, "embedtext_rows_total") == [
        'embedtext_rows_total{model="m"} 5.0',
        'embedtext_rows_total{model="other"} 0.0',
    ]
    assert _exported(metrics, "embedtext_replica_inflight_tokens{") == [
        'embedtext_replica_inflight_tokens{model="m",replica="0"} 7.0'
    ]


def test_every_labelled_metric_makes_its_children_once_and_the_others_are_left_alone():
    metrics = ServerMetrics()
    wrapped = {name for name, value in vars(metrics).items() if isinstance(value, ChildrenOnce)}
    assert {"requests", "rows", "batch_rows", "replica_healthy", "class_latency"} <= wrapped
    assert "unauthenticated" not in wrapped and "event_loop_lag" not in wrapped  # no labels
    metrics.unauthenticated.inc()
    metrics.event_loop_lag.observe(0.001)
    assert _exported(metrics, "embedtext_unauthenticated_total") == ["embedtext_unauthenticated_total 1.0"]
