"""``embedtext bench`` end to end, cheaply: the transport suite at one dim, and the latency suite's
loads (both on the NULL ENGINE).

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
        "null_inprocess_udf_d384",
    }
    assert cases.keys() == end_to_end | {"wire_bytes_d384", "wire_repeated_float_d384"}
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
        "bytes_vs_null_inprocess_d384",
        "wire_bytes_vs_repeated_float",
    ):
        assert isinstance(report["ratios"][key], float) and report["ratios"][key] > 0, key
    target = report["targets"]["bytes_vs_repeated_float"]
    assert target["target"] == 20.0 and isinstance(target["met"], bool)
    assert "NULL ENGINE" in done.stdout or "null_engine" in done.stdout


def test_latency_suite_loads_each_client_relative_to_its_own_maximum(tiny_model_dir, tmp_path):
    """Single rows saturate far below the rows/s of 2048-row chunks; a single-row load given as a
    fraction of the chunks' maximum would overload the server at "25%". NULL ENGINE: the suite's
    bookkeeping and the server's per-request path are what is exercised."""
    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.latency import run_latency
    from embedtext.connectors.local_server import LocalServer

    with LocalServer(
        [f"tiny={tiny_model_dir}"], args=["--set", "engine=null"], log_path=tmp_path / "null.log"
    ) as server:
        texts = BenchCorpus(tiny_model_dir).texts(4 * 2048, 10)
        cases = {
            c["name"]: c
            for c in run_latency(server.target, texts, 10, loads=(0.25, 1.0), single_s=1.0, chunk_requests=1)
        }
    assert set(cases) == {
        "latency_closed_loop_max_10tok",
        "latency_closed_loop_max_single_row_10tok",
        "latency_single_row_25pct",
        "latency_single_row_100pct",
        "latency_chunk_2048_25pct",
        "latency_chunk_2048_100pct",
    }
    single_max = cases["latency_closed_loop_max_single_row_10tok"]["rows_per_s"]
    chunk_max = cases["latency_closed_loop_max_10tok"]["rows_per_s"]
    assert single_max > 0 and chunk_max > 0
    served = 0
    for load in (25, 100):
        single, chunk = cases[f"latency_single_row_{load}pct"], cases[f"latency_chunk_2048_{load}pct"]
        assert abs(single["offered_requests_per_s"] - load / 100 * single_max) <= 0.01 * single_max
        assert abs(chunk["offered_requests_per_s"] - load / 100 * chunk_max / 2048) <= 0.01 * chunk_max / 2048
        for case, rows_per_request in ((single, 1), (chunk, 2048)):
            # Bookkeeping, not zero errors: near its own maximum on a busy machine the server may
            # refuse (RESOURCE_EXHAUSTED, counted apart) or run out the deadline; every request is
            # accounted for exactly once, and any other error type is a bug.
            assert case["rows"] % rows_per_request == 0
            answered = case["rows"] // rows_per_request
            assert answered + case["errors"] + case["resource_exhausted"] == case["requests"], case
            assert sum(case["errors_by_type"].values()) == case["errors"], case
            assert set(case["errors_by_type"]) <= {"DeadlineExceededError", "UnavailableError"}, case
            assert answered == 0 or case["p99_ms"] > 0
            served += answered
    assert served > 0


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
            Variant("large", ("--set", "max_batch_tokens=16384"), env=(("X_VT", "1"),)),
        ),
        ratios=(
            Ratio("vt_rows_per_s_{workload}", "small", "large", kind="scan"),
            Ratio("vt_rss_growth", "large", "large", metric="server_rss_mb", across=("big", "little")),
        ),
        flags=("--set", "engine=null"),
    )
    workloads = [
        Workload(10, 300),
        Workload(10, 500, kind="parquet", name="little"),
        Workload(10, 1000, kind="parquet", name="big"),
    ]
    progress = []
    cases = run_variants(
        comparison,
        [f"tiny={tiny_model_dir}"],
        workloads,
        BenchCorpus(tiny_model_dir),
        rounds=2,
        workdir=tmp_path,
        progress=progress.append,
    )
    by_name = {c["name"]: c for c in cases}
    assert set(by_name) == {f"vt_{v}_{w.label}" for v in ("small", "large") for w in workloads}
    assert all(c["rounds"] == 2 and len(c["rows_per_s_by_round"]) == 2 for c in cases)
    assert by_name["vt_large_10tok"]["path"] == "--set engine=null --set max_batch_tokens=16384 X_VT=1"
    assert by_name["vt_large_big"]["server_rss_mb"] > 0
    # The server's CPU per row is measured for scans (None where a run took under 10 ms of it).
    assert "server_cpu_us_per_row" in by_name["vt_large_10tok"]
    ratios = declared_ratios(cases)
    assert set(ratios) == {"vt_rows_per_s_10tok", "vt_rss_growth"}
    assert all(v > 0 for v in ratios.values())
    assert sum("round 2/2" in line for line in progress) == len(workloads)
