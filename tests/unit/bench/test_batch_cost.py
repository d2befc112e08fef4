"""The batch-cost suite's bookkeeping on the NULL ENGINE (no model: what is checked is that every
loop times every size in each round and the fit and its ratios come out per loop; the figures
mean nothing here), and its fit and pace on known costs."""

import pytest

from embedtext.bench.batch_cost import batch_cost_ratios, fit_batch_cost, run_batch_cost, settled_pace
from embedtext.server.pacing import BulkPacer


def test_every_loop_times_every_size_in_each_round(tiny_model_dir):
    ids = [[101, *range(2000, 2008), 102]] * 8
    lines = []
    cases = run_batch_cost(
        str(tiny_model_dir),
        ids,
        row_counts=(1, 8),
        rounds=2,
        repeats=3,
        slo_ms=250.0,
        settle_s=0,
        engine="null",
        progress=lines.append,
    )
    by_name = {c["name"]: c for c in cases}
    assert set(by_name) == {
        f"batch_cost_{loop}{size}{how}"
        for loop in ("stepped", "async")
        for size in ("_1rows", "_8rows")
        for how in ("", "_queued")
    } | {"batch_cost_stepped", "batch_cost_async"}
    for loop in ("stepped", "async"):
        for rows in (1, 8):
            alone = by_name[f"batch_cost_{loop}_{rows}rows"]
            assert alone["batches"] == 2 * 3 and alone["rows"] == rows and alone["tokens_per_row"] == 10
            assert alone["in_flight"] == 1 and alone["p99_ms"] is not None
            queued = by_name[f"batch_cost_{loop}_{rows}rows_queued"]
            assert queued["batches"] == 2 * 3 and queued["in_flight"] == 2
        fit = by_name[f"batch_cost_{loop}"]
        assert {"fixed_ms", "fixed_ms_queued", "us_per_token", "paced_share", "paced_batch_tokens"} <= set(fit)
    assert sum(line.startswith("batch-cost: round") for line in lines) == 2
    assert set(batch_cost_ratios(cases)) == {
        f"batch_cost_{what}_{loop}"
        for what in ("fixed_ms", "fixed_ms_queued", "us_per_token", "paced_share")
        for loop in ("stepped", "async")
    }


def test_rows_of_different_lengths_are_refused(tiny_model_dir):
    with pytest.raises(ValueError, match="one length"):
        run_batch_cost(str(tiny_model_dir), [[1, 2], [1, 2, 3]], row_counts=(1, 2), slo_ms=250.0, engine="null")


def test_the_fit_finds_fixed_and_per_token_work_under_noise():
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = [50, 200, 800, 3200, 12800]
    seconds = [(0.003 + 60e-6 * x) * rng.uniform(0.97, 1.03) for x in tokens]
    a, b = fit_batch_cost(tokens, seconds)
    assert a == pytest.approx(0.003, rel=0.2) and b == pytest.approx(60e-6, rel=0.05)


def test_the_paced_share_falls_as_fixed_work_nears_the_time_a_batch_may_take():
    def share(fixed_s):
        pacer = BulkPacer(slo_s=0.02, max_batch_tokens=16384, budgets_waited=2, min_batch_tokens=256)
        return settled_pace(pacer, fixed_s, 1e-6)[1]

    assert share(0.0005) > share(0.002) > share(0.004) > 0
    # Fixed work past the 5 ms a batch may take: the smallest batch, and what it computes at.
    tokens, low = settled_pace(
        BulkPacer(slo_s=0.02, max_batch_tokens=16384, budgets_waited=2, min_batch_tokens=256), 0.006, 1e-6
    )
    assert tokens == 256 and low == round(256e-6 / (0.006 + 256e-6), 3)
