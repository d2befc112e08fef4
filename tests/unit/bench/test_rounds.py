"""The rotating-rounds runner pairs each round's runs and reports every path (bench/rounds.py).

The paths here are plain functions that report a given speed per round (no engine): what is
tested is the runner's bookkeeping, which the cpu suite's ratios rest on.
"""

from embedtext.bench import rounds
from embedtext.bench.rounds import RoundsPath, rounds_ratios, run_rounds


def _path(label, speeds, calls, ratio_key=None):
    """A path whose run in round r (counted per work item) takes rows / speeds[r] seconds."""

    def measure(tokens, rows, warmup):
        done = sum(1 for c in calls if c[:2] == (label, tokens))
        calls.append((label, tokens, warmup))
        seconds = rows / speeds[done]
        return {"seconds": seconds, "rows_per_s": rows / seconds, "cpu_s_per_run": {label: float(done)}}

    return RoundsPath(label, f"rounds_{label}", label, measure, ratio_key)


def test_per_round_ratios_pair_the_same_round_and_the_median_is_reported(monkeypatch):
    monkeypatch.setattr(rounds, "SETTLE_S", 0)
    calls, loaded = [], []
    paths = [
        _path("ours", [100, 300, 200, 150, 400], calls),
        _path("peer", [50, 100, 400, 150, 100], calls, ratio_key="ours_vs_peer_rounds"),
        _path("ceiling", [100, 100, 100, 100, 100], calls, ratio_key="ours_vs_ceiling_rounds"),
    ]
    cases = run_rounds(
        paths,
        [(50, 1000), (512, 100)],
        suite="cpu",
        rounds=5,
        load=lambda t, r: loaded.append((t, r)),
        progress=lambda msg: None,
    )

    assert loaded == [(50, 1000), (512, 100)]
    by_name = {c["name"]: c for c in cases}
    assert set(by_name) == {f"rounds_{label}_{t}tok" for label in ("ours", "peer", "ceiling") for t in (50, 512)}
    peer = by_name["rounds_peer_50tok"]
    assert peer["ratio_by_round"] == [2.0, 3.0, 0.5, 1.0, 4.0]
    assert peer["rows_per_s_by_round"] == [50, 100, 400, 150, 100]
    assert peer["rows_per_s"] == 100  # the median round's speed
    assert "ratio_key" not in by_name["rounds_ours_50tok"]
    assert by_name["rounds_ceiling_512tok"]["ratio_by_round"] == [1.0, 3.0, 2.0, 1.5, 4.0]
    assert all(c["suite"] == "cpu" for c in cases)
    assert rounds_ratios(cases, "cpu") == {
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
    paths = [
        _path("ours", [100, 100], calls),
        _path("ids", [100, 100], calls, ratio_key="ours_vs_ids"),
        _path("texts", [100, 100], calls, ratio_key="ours_vs_texts"),
    ]
    paths[1:] = [dataclasses.replace(p, engine="inprocess") for p in paths[1:]]
    run_rounds(paths, [(50, 100)], suite="cpu", rounds=2, load=lambda t, r: None, progress=lambda msg: None)
    assert [c[0] for c in calls] == ["ours", "ids", "texts", "texts", "ids", "ours"]
    # ours | ids texts | (texts ids: same engine as before, no gap) | ours
    assert len(slept) == 3 and set(slept) == {rounds.SETTLE_S}
