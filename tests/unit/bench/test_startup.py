"""The startup suite's ratios: the default's warm ready time, and each variant against it."""

from embedtext.bench.startup import startup_ratios


def _case(variant, ready_s, rows_per_s, every_engine_s=None):
    return {
        "suite": "startup",
        "path_label": variant,
        "ready_s": ready_s,
        "rows_per_s": rows_per_s,
        "every_engine_s": every_engine_s,
    }


def test_the_default_is_read_against_each_other_variant():
    ratios = startup_ratios(
        [_case("default", 41.0, 160.0, 80.0), _case("eager", 30.0, 120.0), _case("shared", 33.0, 140.0)]
    )
    assert ratios["startup_ready_s"] == 41.0
    assert ratios["startup_every_engine_s"] == 80.0  # the later engines too
    assert ratios["startup_ready_s_eager"] == 30.0
    assert ratios["startup_rows_per_s_vs_eager"] == round(160.0 / 120.0, 3)
    assert ratios["startup_ready_s_shared"] == 33.0  # without the interactive replica's engine


def test_a_run_without_later_engines_reports_none():
    assert "startup_every_engine_s" not in startup_ratios([_case("default", 30.0, 120.0)])


def test_no_default_variant_no_ratios():
    assert startup_ratios([_case("eager", 30.0, 120.0)]) == {}


def test_the_rounds_starts_as_one_the_median_ready_time():
    from embedtext.bench.startup import _median_start

    runs = [{"ready_s": r, "seconds": s, "every_engine_s": r + 1} for r, s in ((40.0, 3.0), (44.0, 1.0), (41.0, 2.0))]
    assert _median_start(runs) == {
        "ready_s": 41.0,
        "seconds": 2.0,
        "every_engine_s": 42.0,
        "ready_s_by_round": [40.0, 44.0, 41.0],
    }
