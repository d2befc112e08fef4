"""The mixed suite's bookkeeping on two NULL ENGINE servers (no model: what is checked is that every
phase runs on both modes in each round and the ratios pair them; the figures mean nothing here)."""

from embedtext.bench.mixed import MODES, mixed_ratios, run_mixed


def test_every_phase_runs_on_both_modes_and_the_ratios_pair_them(tiny_model_dir):
    bulk = [f"bulk row {i} of a table" for i in range(64)]
    probes = [f"query {i}" for i in range(8)]
    cases = run_mixed([f"tiny={tiny_model_dir}"], bulk, probes, clients=2, seconds=0.8, rounds=2,
                      args=["--engine", "null"], settle_s=0, progress=lambda _line: None)
    by = {(c["mode"], c["kind"]): c for c in cases}
    assert set(by) == {(m, k) for m in MODES for k in ("idle", "bulk2", "bulk2_alone")}
    for mode in MODES:
        assert by[(mode, "idle")]["probes"] > 0 and by[(mode, "idle")]["rows"] == 0
        assert by[(mode, "bulk2")]["probes"] > 0 and by[(mode, "bulk2")]["rows"] > 0
        assert by[(mode, "bulk2_alone")]["probes"] == 0 and by[(mode, "bulk2_alone")]["rows"] > 0
        assert by[(mode, "bulk2")]["rows"] % len(bulk) == 0  # whole bulk calls only
    assert set(mixed_ratios(cases)) == {"mixed_interactive_p99_bulk2", "mixed_bulk_rows_per_s", "mixed_bulk_rows_per_s_alone"}
