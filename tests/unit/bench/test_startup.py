"""The startup suite's ratios: warm starts only, medians over rounds, rows/s against each variant."""

from embedtext.bench.startup import startup_ratios


def _case(variant, ready_s, rows_per_s, cold=False, every_engine_s=None):
    phases = {"every_engine_s": every_engine_s} if every_engine_s else {}
    return {
        "suite": "startup",
        "variant": variant,
        "ready_s": ready_s,
        "rows_per_s": rows_per_s,
        "cold": cold,
        "phases": phases,
    }


def test_untimed_cold_starts_do_not_count():
    cases = [
        _case("default", 95.0, 100.0, cold=True, every_engine_s=150.0),
        _case("default", 40.0, 160.0, every_engine_s=80.0),
        _case("default", 44.0, 150.0, every_engine_s=90.0),
        _case("default", 41.0, 170.0, every_engine_s=70.0),
        _case("eager", 30.0, 120.0),
        _case("eager", 90.0, 120.0, cold=True),
        _case("shared", 33.0, 140.0),
    ]
    ratios = startup_ratios(cases)
    assert ratios["startup_ready_s"] == 41.0
    assert ratios["startup_every_engine_s"] == 80.0  # the later engines too: the cold start's left out
    assert ratios["startup_ready_s_eager"] == 30.0
    assert ratios["startup_rows_per_s_vs_eager"] == round(160.0 / 120.0, 3)
    assert ratios["startup_ready_s_shared"] == 33.0  # without the interactive replica's engine
    assert "startup_ready_s_async" not in ratios


def test_a_run_without_later_engines_reports_none():
    assert "startup_every_engine_s" not in startup_ratios([_case("default", 30.0, 120.0)])


def test_no_default_variant_no_ratios():
    assert startup_ratios([_case("eager", 30.0, 120.0)]) == {}
