"""The event loop's lateness (server/api/loop_lag.py) on a real asyncio loop: a hold on the loop shows
as a late tick, in the window and in the Prometheus histogram."""

from __future__ import annotations

import asyncio
import time

from embedtext.server.api.loop_lag import LoopLag
from embedtext.server.metrics import ServerMetrics

HOLD_S = 0.15
TICK_S = 0.01


def test_a_hold_on_the_loop_shows_as_a_late_tick():
    metrics = ServerMetrics()
    lag = LoopLag(metrics.event_loop_lag, tick_s=TICK_S)

    async def main() -> None:
        ticking = asyncio.create_task(lag.run())
        await asyncio.sleep(5 * TICK_S)
        time.sleep(HOLD_S)  # noqa: ASYNC251 - the hold under test: Python work on the loop
        await asyncio.sleep(5 * TICK_S)
        ticking.cancel()
        await asyncio.gather(ticking, return_exceptions=True)

    asyncio.run(main())
    p99_ms, max_ms, ticks = lag.figures()
    # The tick due during the hold fired after it: late by the hold less at most one tick.
    assert max_ms >= 1000 * (HOLD_S - TICK_S)
    assert 0 < p99_ms <= max_ms and ticks >= 2
    observed = metrics.registry.get_sample_value("embedtext_event_loop_lag_seconds_count")
    assert observed == ticks  # every tick went to Prometheus too
    assert metrics.registry.get_sample_value("embedtext_event_loop_lag_seconds_bucket", {"le": "0.1"}) < observed


def test_ticks_older_than_the_window_leave_it():
    lag = LoopLag(window_s=1.0)
    lag.add(0.5, now=10.0)
    lag.add(0.001, now=10.6)
    assert lag.figures(now=10.9) == (500.0, 500.0, 2)
    assert lag.figures(now=11.2) == (1.0, 1.0, 1)
    assert lag.figures(now=20.0) == (0.0, 0.0, 0)
