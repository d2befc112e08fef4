"""How late the server's event loop runs: a timer every ``TICK_S``, and how long after its time
it fired.

Everything the server does for a request outside the engines runs on one event loop: gRPC's
calls in and out, decoding, the queue, the hand-overs to the replicas' workers and back. A loop
held by Python work on it, or whose wake-up waits for the GIL behind the tokenizer threads,
delays every caller by as much, and no reply's timings show it: their clocks start in the
handler. This is the loop's own view, for ``Info`` (``event_loop_lag_*``, over the last
``WINDOW_S``) and Prometheus (``embedtext_event_loop_lag_seconds``).

>>> lag = LoopLag(window_s=10.0)
>>> lag.figures(now=0.0)
(0.0, 0.0, 0)
>>> for tick in range(1, 201):  # one late tick in 200: 30 ms, the rest 1 ms
...     lag.add(0.030 if tick == 100 else 0.001, now=tick * 0.1)
>>> lag.figures(now=20.0)  # the last 10 s: ticks 100..200, the late one among them
(1.0, 30.0, 101)
>>> lag.figures(now=20.5)  # 5 ticks more have left the window, the late one with them
(1.0, 1.0, 96)
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from embedtext.server.scheduler.latency_window import nearest_rank

TICK_S = 0.02  # often enough to see a hold of a few ms; 50 wake-ups a second cost next to nothing
WINDOW_S = 10.0  # Info's figures cover this much of the recent past


class LoopLag:
    """The lateness of a timer that fires every ``tick_s`` on the running loop (:meth:`run`)."""

    def __init__(self, histogram=None, *, tick_s: float = TICK_S, window_s: float = WINDOW_S) -> None:
        self.tick_s = tick_s
        self.window_s = window_s
        self._histogram = histogram  # a prometheus Histogram, or None
        # (monotonic time, lateness in s); bounded by the window, and hard-capped for a stalled clock
        self._ticks: deque[tuple[float, float]] = deque(maxlen=int(4 * window_s / tick_s) + 1)

    def add(self, late_s: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._ticks.append((now, late_s))
        if self._histogram is not None:
            self._histogram.observe(late_s)
        self._forget(now)

    def _forget(self, now: float) -> None:
        while self._ticks and self._ticks[0][0] < now - self.window_s:
            self._ticks.popleft()

    def figures(self, now: float | None = None) -> tuple[float, float, int]:
        """p99 and the most it was late, in ms, over the window, and how many ticks they cover."""
        self._forget(time.monotonic() if now is None else now)
        ranked = sorted(late for _, late in self._ticks)
        if not ranked:
            return 0.0, 0.0, 0
        return round(1000 * nearest_rank(ranked, 0.99), 2), round(1000 * ranked[-1], 2), len(ranked)

    async def run(self) -> None:
        """Tick until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.tick_s
            await asyncio.sleep(self.tick_s)
            self.add(max(0.0, loop.time() - due))
