"""Engine speed and SLO pacing: the bookkeeping, on given clocks (no engine needed)."""

import pytest

from embedtext.server.pacing import BULK_SHARE_OF_SLO, BulkPacer, EngineSpeed


def _speed():
    speed = EngineSpeed(smoothing=1.0)
    speed.WINDOW_S = 1.0
    return speed


def test_overlapping_batches_count_busy_time_once():
    speed = _speed()
    speed.started(0, now=0.0)
    speed.started(0, now=0.0)  # two in flight; the engine runs them one after the other
    speed.finished(0, 1000, now=0.5)
    assert speed.tokens_per_s is None  # the window is not full yet
    speed.finished(0, 3000, now=1.0)
    assert speed.tokens_per_s == 4000.0


def test_idle_time_is_not_counted():
    speed = _speed()
    speed.started(0, now=0.0)
    speed.finished(0, 500, now=0.5)
    speed.started(0, now=10.0)  # idle from 0.5 to 10
    speed.finished(0, 500, now=10.5)
    assert speed.tokens_per_s == 1000.0


def test_batches_finishing_together_do_not_skew_the_speed():
    """An engine step that runs two batches ends them a moment apart: per batch, one would look
    slow and the next instant. Over windows of busy time the speed comes out right."""
    speed = EngineSpeed()  # the server's window and smoothing
    t = 0.0
    for _ in range(20):  # steps of 1 s, each running two batches of 1000 tokens
        speed.started(0, now=t)
        speed.started(0, now=t)
        speed.finished(0, 1000, now=t + 1.0)
        speed.finished(0, 1000, now=t + 1.001)
        t += 1.001
    assert speed.tokens_per_s == pytest.approx(2000.0, rel=0.05)


def test_a_fast_engine_is_measured_after_a_window_of_batches():
    """Batches that take next to no time (the null engine's) close a window by their count: waiting
    for 0.5 s of their busy time would hold thousands of them at the first budget."""
    speed = EngineSpeed(smoothing=1.0)
    t = 0.0
    for _ in range(EngineSpeed.WINDOW_BATCHES):
        assert speed.tokens_per_s is None
        speed.started(0, now=t)
        speed.finished(0, 1000, now=t + 0.001)
        t += 1.0  # idle between batches: not busy time
    assert speed.tokens_per_s == pytest.approx(1000 / 0.001)


def test_failed_batches_end_their_busy_time_without_tokens():
    speed = _speed()
    speed.started(0, now=0.0)
    speed.finished(0, 0, now=1.0)
    assert speed.tokens_per_s == 0.0
    assert speed.seconds_for(100) is None  # nothing measured to go on


def test_replicas_keep_their_own_clocks():
    speed = _speed()
    speed.started(0, now=0.0)
    speed.started(1, now=0.5)
    speed.finished(0, 1000, now=1.0)
    speed.finished(1, 1000, now=1.5)
    assert speed.tokens_per_s == 1000.0
    assert speed.seconds_for(4000, replicas=2) == 2.0


def test_the_pacer_budget_follows_the_speed_within_bounds():
    pacer = BulkPacer(slo_s=0.2, max_batch_tokens=4096, budgets_waited=2, min_batch_tokens=128)
    assert pacer.update(None) == pacer.batch_tokens  # unmeasured: unchanged
    assert pacer.update(10_000.0) == int(10_000 * 0.2 * BULK_SHARE_OF_SLO / 2)
    assert pacer.update(10_000_000.0) == 4096  # a fast engine: full batches
    assert pacer.holds_target
    assert pacer.update(100.0) == 128  # too slow: one longest row at a time, and it says so
    assert not pacer.holds_target
    assert pacer.step_s(100.0) == pytest.approx(2 * 128 / 100.0)


def test_the_pacer_refuses_a_target_of_zero():
    with pytest.raises(ValueError):
        BulkPacer(slo_s=0, max_batch_tokens=4096, budgets_waited=2, min_batch_tokens=128)
