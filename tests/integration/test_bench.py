"""``embedtext bench`` end to end, cheaply, on the NULL ENGINE: the transport suite at one dim, and
server variants side by side.

No timing asserts: CI machines are noisy; this checks that the suite runs and reports.
"""

import json
import os
import subprocess
import sys


def test_transport_suite_writes_a_report(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "embedtext.cli",
            "bench",
            "--only",
            "transport",
            "--rows",
            "3000",
            "--dims",
            "384",
            "--json",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert {"hardware", "command", "cases", "ratios", "targets"} <= report.keys()
    assert report["hardware"]["cores"] >= 1 and report["hardware"]["duckdb"]
    cases = {c["name"]: c for c in report["cases"]}
    end_to_end = {
        "null_engine_udf_bytes_d384",
        "null_engine_udf_repeated_float_d384",
        "null_engine_http_json_d384",
    }
    assert cases.keys() == end_to_end
    for case in report["cases"]:
        assert case["suite"] == "transport" and case["rows_per_s"] > 0
    for name in end_to_end:
        case = cases[name]
        assert case["rows"] == 3000 and case["tokens_per_row"] == 10
        assert case["tokens_per_s"] > 0 and case["peak_rss_mb"] > 0
    for key in (
        "bytes_vs_repeated_float",
        "bytes_vs_json",
        "bytes_vs_repeated_float_d384",
        "bytes_vs_json_d384",
    ):
        assert isinstance(report["ratios"][key], float) and report["ratios"][key] > 0, key
    target = report["targets"]["bytes_vs_repeated_float"]
    assert target["target"] == 20.0 and isinstance(target["met"], bool)
    assert "NULL ENGINE" in done.stdout or "null_engine" in done.stdout


def test_server_variants_run_side_by_side_in_rounds_with_declared_ratios(tiny_model_dir, tmp_path):
    """bench/variants.py on the NULL ENGINE: two servers up at once, each kind of workload timed on
    each in every round, and the declared ratios (per workload, by kind, across workloads)."""
    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.rounds import Ratio, Workload, declared_ratios
    from embedtext.bench.variants import Variant, VariantComparison, run_variants

    comparison = VariantComparison(
        "variants-test",
        "vt",
        (
            Variant("small", ("--set", "max_batch_tokens=4096")),
            Variant("large", ("--set", "max_batch_tokens=16384")),
        ),
        ratios=(
            Ratio("vt_rows_per_s_{workload}", "small", "large"),
            Ratio("vt_growth", "large", "large", across=("big", "little")),
        ),
        flags=("--set", "engine=null"),
    )
    workloads = [Workload(10, 300), Workload(10, 500, name="little"), Workload(10, 1000, name="big")]
    progress = []
    cases = run_variants(
        comparison,
        [f"tiny={tiny_model_dir}"],
        workloads,
        BenchCorpus(tiny_model_dir),
        rounds=2,
        progress=progress.append,
    )
    by_name = {c["name"]: c for c in cases}
    assert set(by_name) == {f"vt_{v}_{w.label}" for v in ("small", "large") for w in workloads}
    assert all(c["rounds"] == 2 and len(c["rows_per_s_by_round"]) == 2 for c in cases)
    assert by_name["vt_large_10tok"]["path"] == "--set engine=null --set max_batch_tokens=16384"
    # The server's CPU per row is measured for scans (None where a run took under 10 ms of it).
    assert "server_cpu_us_per_row" in by_name["vt_large_10tok"]
    ratios = declared_ratios(cases)
    # One per workload, and one across two workloads.
    assert set(ratios) == {"vt_rows_per_s_10tok", "vt_rows_per_s_little", "vt_rows_per_s_big", "vt_growth"}
    assert all(v > 0 for v in ratios.values())
    assert sum("round 2/2" in line for line in progress) == len(workloads)
