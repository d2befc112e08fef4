"""The latencies of a model's last interactive requests in the server, for ``Info``: whether the
interactive target holds, as the server sees it.

Each served interactive request adds its time from arrival (before tokenizing) to its vectors
being ready; the window keeps the last ``size`` of them (a bounded deque), and ``Info`` reports
their p50 and p99. The caller's own time (its client, the network) is not in it, and failed
requests are not counted. Prometheus has the same from the queue on, over any range
(``embedtext_class_latency_seconds``).

>>> window = LatencyWindow(size=100)
>>> window.figures()
(0.0, 0.0, 0)
>>> for ms in range(1, 201):  # only the last 100 stay: 101..200 ms
...     window.add(ms / 1000)
>>> window.figures()
(150.0, 199.0, 100)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

# How many of the last interactive requests Info's p50 and p99 are taken over.
RECENT_INTERACTIVE_REQUESTS = 1000


class LatencyWindow:
    def __init__(self, size: int = RECENT_INTERACTIVE_REQUESTS) -> None:
        self._seconds: deque[float] = deque(maxlen=size)

    def add(self, seconds: float) -> None:
        self._seconds.append(seconds)

    def figures(self) -> tuple[float, float, int]:
        """p50 and p99 in ms (0.0 with nothing yet), and how many requests they cover."""
        ranked = sorted(self._seconds)
        if not ranked:
            return 0.0, 0.0, 0
        return round(1000 * nearest_rank(ranked, 0.50), 2), round(1000 * nearest_rank(ranked, 0.99), 2), len(ranked)


def nearest_rank(ranked: Sequence[float], share: float) -> float:
    """The value at ``share`` of sorted, non-empty ``ranked`` (nearest rank: one of the values).

    >>> nearest_rank([1.0, 2.0, 3.0, 4.0], 0.5), nearest_rank([1.0, 2.0, 3.0, 4.0], 0.99)
    (2.0, 4.0)
    """
    return ranked[min(len(ranked) - 1, max(0, round(share * len(ranked)) - 1))]
