"""The startup suite's ratios: warm starts only, medians over rounds, rows/s against each variant."""

from embedtext.bench.startup import startup_ratios


def _case(variant, ready_s, rows_per_s, cold=False):
    return {"suite": "startup", "variant": variant, "ready_s": ready_s, "rows_per_s": rows_per_s, "cold": cold}


def test_untimed_cold_starts_do_not_count():
    cases = [
        _case("default", 95.0, 100.0, cold=True),
        _case("default", 40.0, 160.0),
        _case("default", 44.0, 150.0),
        _case("default", 41.0, 170.0),
        _case("eager", 30.0, 120.0),
        _case("eager", 90.0, 120.0, cold=True),
        _case("shared", 33.0, 140.0),
    ]
    ratios = startup_ratios(cases)
    assert ratios["startup_ready_s"] == 41.0
    assert ratios["startup_ready_s_eager"] == 30.0
    assert ratios["startup_rows_per_s_vs_eager"] == round(160.0 / 120.0, 3)
    assert ratios["startup_ready_s_shared"] == 33.0  # without the interactive replica's engine
    assert "startup_ready_s_async" not in ratios


def test_no_default_variant_no_ratios():
    assert startup_ratios([_case("eager", 30.0, 120.0)]) == {}
