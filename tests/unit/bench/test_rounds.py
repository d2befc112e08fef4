"""The rotating-rounds runner pairs each round's runs and reports every path (bench/rounds.py).

The paths here are plain functions that report a given speed per round (no engine): what is
tested is the runner's bookkeeping, which the cpu suite's ratios rest on.
"""

from embedtext.bench import rounds
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, declared_ratios, run_rounds

WORK = [Workload(50, 1000), Workload(512, 100)]


def _path(label, speeds, calls):
    """A path whose run in round r (counted per workload) takes rows / speeds[r] seconds."""

    def measure(workload, warmup):
        done = sum(1 for c in calls if c[:2] == (label, workload.tokens))
        calls.append((label, workload.tokens, warmup))
        seconds = workload.rows / speeds[done]
        return {"seconds": seconds, "rows_per_s": workload.rows / seconds, "cpu_s_per_run": {label: float(done)}}

    return RoundsPath(label, f"rounds_{label}", label, measure)


def test_per_round_ratios_pair_the_same_round_and_the_median_is_reported(monkeypatch):
    monkeypatch.setattr(rounds, "SETTLE_S", 0)
    calls, loaded = [], []
    paths = [
        _path("ours", [100, 300, 200, 150, 400], calls),
        _path("peer", [50, 100, 400, 150, 100], calls),
        _path("ceiling", [100, 100, 100, 100, 100], calls),
    ]
    ratios = [
        Ratio("ours_vs_peer_rounds{suffix}", "ours", "peer"),
        Ratio("ours_vs_ceiling_rounds{suffix}", "ours", "ceiling"),
    ]
    cases = run_rounds(paths, WORK, suite="cpu", rounds=5, ratios=ratios, load=loaded.append, progress=lambda msg: None)

    assert loaded == WORK
    by_name = {c["name"]: c for c in cases}
    assert set(by_name) == {f"rounds_{label}_{t}tok" for label in ("ours", "peer", "ceiling") for t in (50, 512)}
    ours = by_name["rounds_ours_50tok"]
    assert ours["ratios_by_round"]["ours_vs_peer_rounds"] == [2.0, 3.0, 0.5, 1.0, 4.0]
    assert by_name["rounds_peer_50tok"]["rows_per_s_by_round"] == [50, 100, 400, 150, 100]
    assert by_name["rounds_peer_50tok"]["rows_per_s"] == 100  # the median round's speed
    assert "ratios_by_round" not in by_name["rounds_peer_50tok"]
    assert by_name["rounds_ours_512tok"]["ratios_by_round"]["ours_vs_ceiling_rounds_512"] == [1.0, 3.0, 2.0, 1.5, 4.0]
    assert all(c["suite"] == "cpu" for c in cases)
    assert declared_ratios(cases) == {
        "ours_vs_peer_rounds": 2.0,
        "ours_vs_ceiling_rounds": 2.0,
        "ours_vs_peer_rounds_512": 2.0,
        "ours_vs_ceiling_rounds_512": 2.0,
    }
    # Only the first round warms up; the order rotates, so no path always runs first.
    assert [c[2] for c in calls if c[1] == 50] == [True] * 3 + [False] * 12
    firsts = {calls[i][0] for i in range(0, 15, 3)}
    assert firsts == {"ours", "peer", "ceiling"}


def test_idle_gap_only_where_the_engine_changes(monkeypatch):
    """The gap lets the last run's engine stop polling; two paths on one engine need none between them."""
    import dataclasses
    import types

    slept = []
    monkeypatch.setattr(rounds, "time", types.SimpleNamespace(sleep=slept.append))
    calls = []
    paths = [_path("ours", [100, 100], calls), _path("ids", [100, 100], calls), _path("texts", [100, 100], calls)]
    paths[1:] = [dataclasses.replace(p, engine="inprocess") for p in paths[1:]]
    run_rounds(paths, [Workload(50, 100)], suite="cpu", rounds=2, progress=lambda msg: None)
    assert [c[0] for c in calls] == ["ours", "ids", "texts", "texts", "ids", "ours"]
    # ours | ids texts | (texts ids: same engine as before, no gap) | ours
    assert len(slept) == 3 and set(slept) == {rounds.SETTLE_S}


def test_a_ratio_across_workloads_and_one_where_its_metric_exists(monkeypatch):
    """Memory growth compares one path at two sizes; a latency ratio only where latencies exist."""
    monkeypatch.setattr(rounds, "SETTLE_S", 0)

    def path(label, scale):
        def measure(workload, warmup):
            p50 = 2.0 * scale if workload.kind == "single_rows" else None
            return {"seconds": 1.0, "rss_mb": workload.rows * scale, "p50_ms": p50}

        return RoundsPath(label, label, label, measure)

    work = [
        Workload(16, 10, name="small"),
        Workload(16, 40, name="big"),
        Workload(8, 5, kind="single_rows", name="seq"),
    ]
    ratios = [
        Ratio("a_growth", "a", "a", metric="rss_mb", across=("big", "small")),
        Ratio("p50_{workload}", "a", "b", metric="p50_ms"),
        Ratio("rss_{workload}", "a", "b", metric="rss_mb"),
    ]
    cases = run_rounds([path("a", 1), path("b", 2)], work, suite="s", rounds=2, ratios=ratios, progress=lambda m: None)
    assert declared_ratios(cases) == {"a_growth": 4.0, "p50_seq": 0.5, "rss_small": 0.5, "rss_big": 0.5, "rss_seq": 0.5}
    by_name = {c["name"]: c for c in cases}
    assert by_name["a_big"]["workload"] == "big" and "a_growth" in by_name["a_big"]["ratios_by_round"]


def test_every_case_has_the_fields_a_report_prints(monkeypatch):
    """A path may return no more than its seconds; the report's table still prints its case."""
    from embedtext.bench.report import format_report

    monkeypatch.setattr(rounds, "SETTLE_S", 0)

    def path(label, seconds):
        return RoundsPath(label, label, "seconds alone", lambda workload, warmup: {"seconds": seconds, "calls": 3})

    cases = run_rounds(
        [path("only", 0.5), path("other", 1.0)],
        [Workload(20, 100)],
        suite="s",
        rounds=1,
        ratios=[Ratio("only_vs_other", "only", "other")],
        progress=lambda m: None,
    )
    assert cases[0]["rows_per_s"] == 200 and cases[0]["calls"] == 3 and cases[0]["p50_ms"] is None
    assert declared_ratios(cases) == {"only_vs_other": 2.0}
    report = {"cases": cases, "ratios": declared_ratios(cases), "targets": {}}
    assert "only_20tok" in format_report(report) and "only_vs_other" in format_report(report)
