"""A running server's Prometheus metrics in tests: read, summed, and waited on (on the tests' path:
test folders are not packages)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

POLL_S = 0.02  # between two reads of the metrics while waiting on them


def read_metrics(port: int) -> dict[str, float]:
    """A server's Prometheus samples, as {'name{labels}': value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def summed(samples: dict[str, float], name: str) -> float:
    """Every sample of the metric ``name`` added up, whatever its labels."""
    return sum(value for key, value in samples.items() if key.startswith(name))


def per_replica(samples: dict[str, float], name: str, model: str = "tiny") -> dict[str, float]:
    """A per-replica metric's samples for ``model``, by replica index ("0", "1", ...)."""
    prefix = f'{name}{{model="{model}",replica="'
    return {key[len(prefix) : -2]: value for key, value in samples.items() if key.startswith(prefix)}


class MetricsServer:
    """A LocalServer and its Prometheus port."""

    def __init__(self, server, metrics_port: int) -> None:
        self.server = server
        self.target = server.target
        self.process = server.process
        self.metrics_port = metrics_port

    def metrics(self) -> dict[str, float]:
        return read_metrics(self.metrics_port)


def wait_for_metrics(
    metrics: Callable[[], dict[str, float]],
    done: Callable[[dict[str, float]], bool],
    what: str,
    timeout_s: float = 120,
    meanwhile: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Read ``metrics()`` until ``done(samples)``, and return the samples then; fail saying ``what``
    was waited for after ``timeout_s``. ``meanwhile()`` runs at each read: a check of its own that
    may fail the wait sooner (the process the wait depends on has ended)."""
    deadline = time.monotonic() + timeout_s
    while not done(samples := metrics()):
        if meanwhile is not None:
            meanwhile()
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(POLL_S)
    return samples
